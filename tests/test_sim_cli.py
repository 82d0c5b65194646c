"""python -m batchlab.sim: JSON output, defaults, bad arguments (one line, exit 2), unstable loads."""

import json
import subprocess
import sys

import pytest

from batchlab.sim.__main__ import main

KEYS = {"throughput_rps", "latency_ms", "queue_ms", "batch_size_mean", "utilization", "rejected", "stable"}


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dynamic_prints_one_json_object(capsys):
    code, out, err = run_cli(capsys, "dynamic", "--rate", "5000", "--max-batch-size", "8",
                             "--max-queue-delay-us", "100", "--base-us", "300", "--per-item-us", "100",
                             "--preferred", "4,8", "--instances", "1", "--requests", "50000", "--seed", "3")
    assert code == 0 and err == ""
    assert len(out.strip().splitlines()) == 1
    d = json.loads(out)
    assert KEYS <= set(d)
    assert set(d["latency_ms"]) >= {"mean", "p50", "p95", "p99"} and "mean" in d["queue_ms"]
    assert d["stable"] is True and d["rejected"] == 0
    assert d["throughput_rps"] == pytest.approx(5000, rel=0.03)
    assert 1 < d["batch_size_mean"] <= 8 and set(map(int, d["batch_size_hist"])) <= set(range(1, 9))
    assert d["requests"] == 45_000  # 10 % warm-up left out


def test_defaults_are_one_instance_200k_requests(capsys):
    code, out, _ = run_cli(capsys, "dynamic", "--rate", "1000", "--max-batch-size", "4",
                           "--base-us", "200", "--per-item-us", "50")
    d = json.loads(out)
    assert code == 0 and d["requests"] == 180_000 and d["capacity_rps"] == pytest.approx(4 / 400e-6)


def test_unstable_load_finishes_and_says_so(capsys):
    code, out, _ = run_cli(capsys, "dynamic", "--rate", "100000", "--max-batch-size", "8",
                           "--base-us", "300", "--per-item-us", "100", "--requests", "100000")
    d = json.loads(out)
    assert code == 0 and d["stable"] is False
    assert d["throughput_rps"] == pytest.approx(8 / 1100e-6, rel=0.001)


def test_queue_policy_options(capsys):
    code, out, _ = run_cli(capsys, "dynamic", "--rate", "20000", "--max-batch-size", "8",
                           "--base-us", "300", "--per-item-us", "100", "--requests", "20000",
                           "--max-queue-size", "16")
    d = json.loads(out)
    assert code == 0 and d["rejected"] > 0 and d["queue_ms"]["max"] < 5


@pytest.mark.parametrize("argv, fragment", [
    (["dynamic", "--rate", "-5", "--max-batch-size", "8", "--base-us", "1", "--per-item-us", "1"], "rate must be > 0"),
    (["dynamic", "--rate", "5", "--max-batch-size", "x", "--base-us", "1", "--per-item-us", "1"], "--max-batch-size"),
    (["dynamic", "--rate", "5", "--base-us", "1", "--per-item-us", "1"], "required"),
    (["dynamic", "--rate", "5", "--max-batch-size", "4", "--preferred", "8", "--base-us", "1", "--per-item-us", "1"],
     "exceeds max_batch_size"),
    (["dynamic", "--rate", "5", "--max-batch-size", "4", "--preferred", "a,b", "--base-us", "1", "--per-item-us", "1"],
     "comma-separated"),
    (["dynamic", "--rate", "5", "--max-batch-size", "4", "--base-us", "0", "--per-item-us", "0"], "> 0"),
    (["dynamic", "--rate", "5", "--max-batch-size", "4", "--base-us", "1", "--per-item-us", "1", "--requests", "0"],
     "--requests"),
    (["dynamic", "--rate", "5", "--max-batch-size", "4", "--base-us", "1", "--per-item-us", "1", "--instances", "0"],
     "instances"),
    (["nonsense"], "invalid choice"),
    ([], "required"),
])
def test_bad_arguments_one_line_exit_2(capsys, argv, fragment):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err


def test_module_entry_point_and_seed_demo():
    r = subprocess.run([sys.executable, "-m", "batchlab.sim", "seed-demo"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert r.stdout.splitlines()[1] == "动态批 batch=4 delay=3.0 朴素模式 => (28, 6.692857142857145)"
    r = subprocess.run([sys.executable, "-m", "batchlab.sim", "dynamic", "--rate", "1"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
