"""batchlab.probe without a server: batcher settings, patterns through the simulator, latency split."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from batchlab.load.stats import ModelStats
from batchlab.models.requests import generate_inputs
from batchlab.probe import (BatchTimes, Calibration, GenerateCalibration, Pattern, batches_from_sizes, burst,
                            chapter_patterns, latency, load_factor, service_from_stats, simulate_pattern, spaced,
                            split_report, split_simulated)
from batchlab.sim import Affine, BatchRule, TokenCost, simulate_static_generation

ECHO_CONFIG = {"name": "embed", "max_batch_size": 32, "input": [{"name": "TOKENS"}],
               "dynamic_batching": {"preferred_batch_size": ["32"]}, "backend": "python"}


def test_settings_apply_to_a_config() -> None:
    s = BatchRule(max_batch_size=8, preferred=(8, 4, 4), max_queue_delay_us=150_000)
    assert s.preferred == (4, 8)
    cfg = s.apply(ECHO_CONFIG)
    assert cfg["max_batch_size"] == 8 and "max_batch_size" not in cfg["dynamic_batching"]
    assert cfg["dynamic_batching"] == {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 150000}
    assert ECHO_CONFIG["max_batch_size"] == 32  # the input is not modified
    json.dumps(cfg)
    plain = BatchRule(max_batch_size=8)
    assert plain.apply(ECHO_CONFIG)["dynamic_batching"] == {}


@pytest.mark.parametrize("kw, msg", [
    ({"max_batch_size": 0}, "max_batch_size"),
    ({"max_batch_size": 4, "preferred": (8,)}, "preferred"),
    ({"max_batch_size": 4, "max_queue_delay_us": -1}, "max_queue_delay_us"),
])
def test_settings_reject_bad_values(kw, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        BatchRule(**kw)


def test_pattern_helpers() -> None:
    assert burst(3, 0.5) == (0.5, 0.5, 0.5)
    assert spaced(3, 0.04) == pytest.approx((0.0, 0.04, 0.08))
    with pytest.raises(ValueError, match="non-decreasing"):
        Pattern("bad", (0.2, 0.1), BatchRule(4))
    with pytest.raises(ValueError):
        Pattern("empty", (), BatchRule(4))
    assert batches_from_sizes([4, 4, 4, 4, 3, 3, 3]) == [4, 3]
    assert batches_from_sizes([1, 2, 2]) == [1, 2]
    assert batches_from_sizes([8, 8, 3, 3]) is None
    assert batches_from_sizes([]) == []


def test_chapter_patterns_follow_the_rule_in_the_simulator() -> None:
    svc = Affine(2_000, 1_000)  # 3 ms for one request: short beside the 40 ms gaps and 150 ms delay
    got = {p.name[0]: simulate_pattern(p, svc) for p in chapter_patterns()}
    assert got["A"].batches == [5]
    assert got["B"].batches == [8, 3]
    assert got["C"].batches == [4, 2]
    assert got["D"].batches == [4, 3]
    assert got["E"].batches == [1, 1, 1, 1, 1]
    assert got["B"].histogram == {3: 1, 8: 1}
    # the batch of 5 in A waits for the 150 ms window, then runs 7 ms
    np.testing.assert_allclose(got["A"].latency_ms, 157.0, atol=0.002)  # the client sends the 5 a µs apart
    # D: 4 leave at once (largest preferred size reachable), 3 wait for the window
    np.testing.assert_allclose(sorted(got["D"].latency_ms), [6.0] * 4 + [155.0] * 3, atol=0.002)


def test_generate_inputs_shapes() -> None:
    x = generate_inputs([1, 5, 6], 4, ignore_eos=True, rows=3)
    assert x["PROMPT"].shape == (3, 3) and x["PROMPT"].dtype == np.int32
    assert x["MAX_TOKENS"].tolist() == [[4]] * 3 and x["IGNORE_EOS"].all()
    with pytest.raises(ValueError):
        generate_inputs([], 4)
    with pytest.raises(ValueError):
        generate_inputs([1], 0)


def test_load_factor_from_statistics() -> None:
    cal = Calibration("m", [1, 4], {1: 2.0, 4: 5.0}, {1: 2.0, 4: 5.0}, {1: 2.5, 4: 5.5}, 0.5)
    st = ModelStats("m")
    ms = 1_000_000
    # 10 batches of 1 at 3 ms (x1.5), 30 batches of 2 at 4.5 ms (calibration interpolates 3 ms: x1.5),
    # 2 batches of 4 (too few to count)
    st.batches = {1: {p: (10, 10 * 3 * ms) for p in ("compute_infer",)},
                  2: {p: (30, 30 * int(4.5 * ms)) for p in ("compute_infer",)},
                  4: {p: (2, 2 * 100 * ms) for p in ("compute_infer",)}}
    assert load_factor(cal, st) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="often enough"):
        load_factor(cal, st, min_batches=100)
    svc = service_from_stats(st)
    assert svc.time(1) == pytest.approx(3e-3) and svc.time(2) == pytest.approx(4.5e-3)
    assert service_from_stats(st, min_batches=1).time(4) == pytest.approx(0.1)


def test_calibration_keeps_each_sizes_fastest_round() -> None:
    times = BatchTimes("m", [1, 4], compute_ms={1: np.array([3.0, 2.0]), 4: np.array([6.0, 7.0])},
                       infer_ms={1: np.array([2.5, 1.5]), 4: np.array([5.0, 6.5])},
                       latency_ms={1: np.array([4.0, 3.5]), 4: np.array([9.0, 8.0])})
    cal = Calibration.from_times(times)
    assert cal.service_ms == {1: 2.0, 4: 6.0} and cal.compute_ms == {1: 1.5, 4: 5.0}
    assert cal.client_ms == {1: 3.5, 4: 8.0} and cal.overhead_ms == pytest.approx(1.5)


def _times(sizes, values) -> BatchTimes:
    arr = {b: np.array([v]) for b, v in zip(sizes, values)}
    return BatchTimes("generate", list(sizes), arr, arr, arr)


def _calibration() -> GenerateCalibration:
    # t_step(B) = 2 + 0.5 B, prefill t_p(B) = 2 + 0.1·P·B with P = 10, N = 11 tokens
    sizes = [1, 2, 4]
    pre = [2 + 1.0 * b for b in sizes]
    full = [p + 10 * (2 + 0.5 * b) for p, b in zip(pre, sizes)]
    return GenerateCalibration(sizes, 10, 11, _times(sizes, pre), _times(sizes, full))


def test_calibration_recovers_the_cost_model() -> None:
    cal = _calibration()
    np.testing.assert_allclose(cal.step_ms, [2.5, 3.0, 4.0])
    a, b = cal.step_fit()
    assert a == pytest.approx(2.0) and b == pytest.approx(0.5)
    cost = cal.token_cost()
    assert cost.decode_base == pytest.approx(2000) and cost.decode_per_seq == pytest.approx(500)
    assert cost.prefill_per_token == pytest.approx(100)
    assert cal.prefill_at(3) == pytest.approx(5.0)
    assert cal.table()[2]["step_per_seq_ms"] == pytest.approx(1.0)
    bt = _times([1, 2, 4], [3.0, 4.0, 6.0])
    assert bt.fit() == pytest.approx((2.0, 1.0))
    np.testing.assert_allclose(bt.speedup(), [1.0, 1.5, 2.0])
    with pytest.raises(ValueError):
        bt.median("nope")


def test_batch_times_use_the_fastest_round_and_never_fit_a_negative_fixed_cost() -> None:
    rounds = {1: np.array([3.0, 9.0]), 2: np.array([4.0, 4.5]), 4: np.array([6.0, 30.0])}
    bt = BatchTimes("embed", [1, 2, 4], rounds, rounds, rounds)
    np.testing.assert_allclose(bt.minimum(), [3.0, 4.0, 6.0])
    np.testing.assert_allclose(bt.median(), [6.0, 4.25, 18.0])
    assert bt.fit() == pytest.approx((2.0, 1.0))
    convex = {1: np.array([1.0]), 2: np.array([2.0]), 4: np.array([9.0])}  # superlinear: the line dips below 0
    a, b = BatchTimes("embed", [1, 2, 4], convex, convex, convex).fit()
    assert a == 0.0 and b == pytest.approx((1 + 4 + 36) / (1 + 4 + 16))


def test_split_report_adds_up() -> None:
    cal = _calibration()
    ns = 1_000_000
    # 10 requests: 2 executions of 4 and 1 of 2; queue 5 ms, compute (input+infer+output) 30 ms each
    st = ModelStats("generate", inference_count=10, execution_count=3,
                    phases={"success": (10, 40 * 10 * ns), "fail": (0, 0), "queue": (10, 5 * 10 * ns),
                            "compute_input": (10, 1 * 10 * ns), "compute_infer": (10, 28 * 10 * ns),
                            "compute_output": (10, 1 * 10 * ns)},
                    batches={4: {"compute_infer": (2, 0)}, 2: {"compute_infer": (1, 0)}})
    report = SimpleNamespace(server=st, latency_ms=lambda: {"mean": 42.0})
    sp = split_report(report, cal)
    # 8 requests ran with t_p(4) = 6, 2 with t_p(2) = 4
    assert sp["prefill"] == pytest.approx((8 * 6 + 2 * 4) / 10)
    assert sp["queue"] == pytest.approx(5.0) and sp["overhead"] == pytest.approx(42 - 5 - 30)
    assert sp["queue"] + sp["prefill"] + sp["decode"] + sp["overhead"] == pytest.approx(sp["total"])
    assert sp["batch"] == pytest.approx(10 / 3) and sp["batch_seen"] == pytest.approx((8 * 4 + 2 * 2) / 10)
    with pytest.raises(ValueError, match="statistics"):
        split_report(SimpleNamespace(server=None, latency_ms=lambda: {"mean": 1.0}), cal)


def test_split_simulated() -> None:
    cost = TokenCost(prefill_per_token=100, decode_base=2_000, decode_per_seq=500)
    res = simulate_static_generation([0.0, 0.0], [10, 10], [5, 5], cost, max_batch_size=2, warmup=0.0)
    sp = split_simulated(res)
    assert sp["queue"] == pytest.approx(0.0)
    assert sp["prefill"] == pytest.approx(2.0 + 0.1 * 20)
    assert sp["decode"] == pytest.approx(4 * (2.0 + 0.5 * 2))
    assert sp["total"] == pytest.approx(sp["prefill"] + sp["decode"])


def test_calibrate_generate_alternates_prefill_and_full_round_by_round(monkeypatch) -> None:
    """t_step is a difference of two fastest rounds: both kinds must be measured in the same stretch of
    time, round by round, not one phase after the other (a load change between phases biases t_step)."""
    calls = []

    def fake(server, model, inputs_for, sizes, rounds, warmup_rounds):
        n = int(inputs_for(1)["MAX_TOKENS"].ravel()[0])
        calls.append((n, rounds, warmup_rounds))
        ms = {b: np.array([float(n * b + len(calls))]) for b in sizes}
        return BatchTimes(model, list(sizes), ms, ms, ms)

    monkeypatch.setattr(latency, "measure_batch_times", fake)
    cal = latency.calibrate_generate(None, [5, 6, 7], sizes=(1, 4), n_tokens=9, rounds=3)
    assert calls == [(1, 1, 1), (9, 1, 1), (1, 1, 0), (9, 1, 0), (1, 1, 0), (9, 1, 0)]
    assert cal.prefill.compute_ms[4].tolist() == [5.0, 7.0, 9.0]   # every round kept, in order
    assert cal.full_ms.tolist() == [11.0, 38.0]                     # fastest round per size
    with pytest.raises(ValueError, match="rounds"):
        latency.calibrate_generate(None, [5, 6, 7], rounds=0)
