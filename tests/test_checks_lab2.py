"""Lab 2 checks (no server needed): the block writer, sweep rows, predictions, the SLO choice."""

from __future__ import annotations

from batchlab.labs.lab2 import (check_best_under_slo, check_dynamic_batching_block, check_predict_sweep,
                                  check_sweep_rows, reference_predictions)
from batchlab.sim import Affine


def block(delay, preferred=()):
    lines = ["dynamic_batching {", f"  max_queue_delay_microseconds: {int(delay)}"]
    if preferred:
        lines.append("  preferred_batch_size: [ " + ", ".join(map(str, preferred)) + " ]")
    return "\n".join(lines + ["}"])


def test_block_right_and_wrong(capsys) -> None:
    assert check_dynamic_batching_block(block).passed
    capsys.readouterr()
    r = check_dynamic_batching_block(lambda d, p=(): block(d, p).replace("{", "{\n  max_batch_size: 32", 1))
    out = capsys.readouterr().out
    assert r.score == 0 and "max_batch_size" in out and "Triton 读不懂" in out
    r = check_dynamic_batching_block(lambda d, p=(): block(d / 1000, p))  # milliseconds, not microseconds
    assert not r.passed and "max_queue_delay_microseconds 不对" in capsys.readouterr().out
    r = check_dynamic_batching_block(lambda d, p=(): block(d))  # forgets preferred sizes
    assert r.score == 3 and "preferred_batch_size" in capsys.readouterr().out


def _rows(n=6):
    return [{"delay_us": d, "preferred": p, "throughput_rps": 100.0, "p95_ms": 9.0, "mean_batch": 2.0}
            for d in (0, 2000, 8000) for p in ((), (8, 16))][:n]


def test_sweep_rows(capsys) -> None:
    grid = dict(delays=(0, 2000, 8000), preferred_sets=((), (8, 16)))
    assert check_sweep_rows(_rows(), **grid).passed
    capsys.readouterr()
    assert check_sweep_rows(_rows(4), **grid).score == 2 and "应有 6 行" in capsys.readouterr().out
    bad = [{**r, "mean_batch": None} for r in _rows()]
    r = check_sweep_rows(bad, **grid)
    assert r.score == 2 and "mean_batch" in capsys.readouterr().out
    r = check_sweep_rows([{k: v for k, v in row.items() if k != "p95_ms"} for row in _rows()], **grid)
    assert r.score == 0 and "缺少键 p95_ms" in capsys.readouterr().out


def test_predictions(capsys) -> None:
    def right(service, rate, delays, prefs, overhead_ms=0.0):
        return reference_predictions(service, rate, delays, prefs, overhead_ms)

    svc = Affine(3000.0, 300.0)
    assert check_predict_sweep(right, service=svc, rate=500.0, overhead_ms=1.0).passed
    capsys.readouterr()

    def no_overhead(service, rate, delays, prefs, overhead_ms=0.0):
        return reference_predictions(service, rate, delays, prefs, 0.0)
    r = check_predict_sweep(no_overhead, service=svc, rate=500.0, overhead_ms=5.0)
    assert r.score == 2 and "overhead_ms" in capsys.readouterr().out


def test_best_under_slo(capsys) -> None:
    def right(rows, slo):
        ok = [r for r in rows if r["p95_ms"] <= slo]
        return max(ok, key=lambda r: r["throughput_rps"]) if ok else None

    assert check_best_under_slo(right).passed
    capsys.readouterr()
    r = check_best_under_slo(lambda rows, slo: max(rows, key=lambda r: r["throughput_rps"]))
    out = capsys.readouterr().out
    assert r.score == 1 and "超了 SLO" in out
    strict = lambda rows, slo: right([x for x in rows if x["p95_ms"] < slo], slo)
    r = check_best_under_slo(strict)
    assert r.score == 2 and "<=" in capsys.readouterr().out
