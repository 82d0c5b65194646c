"""The roofline: formulas against the spec-sheet figures, the knee finder (theory); a CPU sweep (probe)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from batchlab.probe import roofline as probe
from batchlab.theory import roofline as rl


def test_ridge_points_of_the_issue() -> None:
    assert rl.H100_SXM.ridge == pytest.approx(295.2, abs=0.1)
    assert rl.H200.ridge == pytest.approx(206.0, abs=0.1)
    assert rl.ridge_batch(rl.H100_SXM.bandwidth, rl.H100_SXM.peak_flops, 2) == pytest.approx(rl.H100_SXM.ridge)
    assert rl.ridge_batch(40e9, 200e9, 4) == pytest.approx(10.0)  # float32 doubles it


def test_roofline_time_regimes() -> None:
    p, s, bw, f = 7e9, 2, rl.H100_SXM.bandwidth, rl.H100_SXM.peak_flops
    floor = p * s / bw
    assert rl.roofline_time(1, p, s, bw, f) == pytest.approx(floor)
    assert rl.roofline_time(64, p, s, bw, f) == pytest.approx(floor)       # still memory-bound
    assert rl.roofline_time(1024, p, s, bw, f) == pytest.approx(2 * p * 1024 / f)
    b_star = rl.ridge_batch(bw, f, s)
    assert rl.roofline_time(b_star, p, s, bw, f) == pytest.approx(floor)  # the roofs meet at B*


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "x", None])
def test_bad_numbers_are_value_errors(bad) -> None:
    with pytest.raises(ValueError):
        rl.roofline_time(bad, 1e9, 2, 1e12, 1e15)


def test_knee_batch_shapes() -> None:
    bs = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert rl.knee_batch(bs, [max(1.0, b / 64) for b in bs]) == pytest.approx(64)
    assert rl.knee_batch(bs, [1.0 + b / 64 for b in bs]) == pytest.approx(65)
    assert math.isinf(rl.knee_batch(bs, [1.0 + 1e-4 * i for i in range(len(bs))]))
    assert math.isinf(rl.knee_batch(bs, [1.0 - 1e-3 * i for i in range(len(bs))]))
    with pytest.raises(ValueError):
        rl.knee_batch([1], [1.0])


def test_spec_lookup() -> None:
    assert rl.spec_for("NVIDIA H200") is rl.H200
    assert rl.spec_for("NVIDIA H100 80GB HBM3") is rl.H100_SXM
    assert rl.spec_for("NVIDIA H100 PCIe") is rl.H100_PCIE
    assert rl.spec_for("Tesla T4") is None


def test_shapes_count_parameters() -> None:
    toy = probe.toy_shape()
    assert toy.n_params == 4 * (256 * 768 + 256 * 256 + 2 * 256 * 1024)
    assert rl.GPU_SHAPE.n_params == 4 * (4 * 4096**2 + 2 * 4096 * 11008)
    with pytest.raises(ValueError):
        rl.DecodeShape("bad", 0, 1, 1)


def test_cpu_sweep_runs_and_is_positive() -> None:
    shape = rl.DecodeShape("tiny", 64, 128, 1)
    pts = probe.decode_sweep(shape, [1, 4, 16], device="cpu", repeats=2)
    assert [p.batch for p in pts] == [1, 4, 16]
    assert all(p.seconds > 0 and p.tokens_per_s > 0 for p in pts)
    with pytest.raises(ValueError):
        probe.decode_sweep(shape, [0], device="cpu")
    with pytest.raises(ValueError):
        probe.decode_sweep(shape, [1], device="tpu")


def test_measure_cpu_is_plausible() -> None:
    hw = probe.measure_cpu(array_mb=16, matmul_n=256, repeats=2)
    assert 1e8 < hw.bandwidth < 1e13 and 1e8 < hw.peak_flops < 1e14
    assert hw.dtype == "float32" and hw.ridge == pytest.approx(hw.peak_flops / hw.bandwidth)


@pytest.mark.slow
def test_cli_cpu_quick_prints_json() -> None:
    proc = subprocess.run([sys.executable, "-m", "batchlab.probe.roofline", "--device", "cpu", "--quick",
                           "--preset", "toy", "--batches", "1,8"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["device"] == "cpu" and [r["batch"] for r in out["sweep"]] == [1, 8]
    assert out["ridge_batch"] > 0 and out["spec"] is None


def test_cli_without_gpu_says_so() -> None:
    if probe.torch_cuda() is not None:
        pytest.skip("a CUDA GPU is present")
    proc = subprocess.run([sys.executable, "-m", "batchlab.probe.roofline", "--device", "cuda"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "CUDA" in proc.stderr


def test_torch_path_on_cpu() -> None:
    """The torch (bf16) code path that runs on a GPU, exercised on the CPU where torch is installed."""
    pytest.importorskip("torch")
    pts = probe.decode_sweep(rl.DecodeShape("tiny", 64, 128, 1), [1, 8], device="torch-cpu", repeats=2)
    assert [p.batch for p in pts] == [1, 8] and all(p.seconds > 0 for p in pts)


def test_theory_roofline_imports_nothing_above_theory() -> None:
    code = ("import sys, batchlab.theory.roofline, batchlab.theory.kv; "
            "print(sorted(m for m in sys.modules if m.startswith('batchlab.') "
            "and not m.startswith(('batchlab.theory', 'batchlab._validate'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
