"""Animation frames from simulator records: queue, pot, padding, time window, utilisation."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.sim import Affine, TokenCost, simulate_continuous, simulate_dynamic, simulate_static_generation
from batchlab.viz import (DemoParams, Lane, default_horizon, frame_at, lane_from_result, run_demo, utilization,
                          utilization_series)


def _lane(**kw) -> Lane:
    """Two executions by hand: [0, 1) with 2 requests (one padded half the time), [2, 4) with 1."""
    base = dict(
        name="hand", kind="static", slots=4, delay_s=0.5,
        arrival=np.array([0.0, 0.0, 1.5]), start=np.array([0.0, 0.0, 2.0]), finish=np.array([1.0, 1.0, 4.0]),
        batch_id=np.array([0, 0, 1]), output_tokens=np.array([10, 5, 8]),
        b_start=np.array([0.0, 2.0]), b_end=np.array([1.0, 4.0]), b_size=np.array([2, 1]),
        b_useful=np.array([0.75, 1.0]),
    )
    base.update(kw)
    return Lane(**base)


def test_utilization_by_hand() -> None:
    lane = _lane()
    busy, fill = utilization(lane, 0.0, 4.0)
    assert busy == pytest.approx(3.0 / 4.0)
    # slot-time: 1 s × 2 × 0.75 + 2 s × 1 × 1 = 3.5 over 4 slots × 4 s
    assert fill == pytest.approx(3.5 / 16.0)
    assert utilization(lane, 1.0, 2.0) == (0.0, 0.0)
    assert utilization(lane, 3.0, 3.0) == (0.0, 0.0)
    b, f = utilization_series(lane, [0.0, 1.0, 2.0, 4.0])
    np.testing.assert_allclose(b, [1.0, 0.0, 1.0])
    np.testing.assert_allclose(f, [1.5 / 4, 0.0, 0.25])
    with pytest.raises(ValueError, match="increasing"):
        utilization_series(lane, [0.0, 0.0])


def test_frame_queue_pot_padding_and_window() -> None:
    lane = _lane()
    f = frame_at(lane, 0.8)  # request 1 (5 tokens) is done at 0.5 of the batch: padding
    assert list(f.gpu_ids) == [0, 1]
    np.testing.assert_allclose(f.gpu_progress, [0.8, 1.0])
    assert list(f.gpu_padding) == [False, True]
    assert f.queue_len == 0 and f.window is None and f.done == 0
    f = frame_at(lane, 1.75)  # request 2 waits 0.25 s of a 0.5 s window; the pot is empty
    assert list(f.queue_ids) == [2] and f.queue_age[0] == pytest.approx(0.25)
    assert f.window == pytest.approx(0.5)
    assert f.batch_size == 0 and f.done == 2
    f = frame_at(lane, 4.0)
    assert f.done == 3 and f.batch_size == 0 and f.queue_len == 0
    with pytest.raises(ValueError, match=">= 0"):
        frame_at(lane, -1.0)


def test_lane_checks_its_columns() -> None:
    with pytest.raises(ValueError, match="kind"):
        _lane(kind="magic")
    with pytest.raises(ValueError, match="slots"):
        _lane(slots=0)
    with pytest.raises(ValueError, match="finish"):
        _lane(finish=np.array([1.0]))
    with pytest.raises(ValueError, match="b_size"):
        _lane(b_size=np.array([1]))


def test_dynamic_lane_from_the_simulator_matches_its_batches() -> None:
    # 5 arrivals within a 100 ms window: one batch of 5 leaves when the window closes
    res = simulate_dynamic([0.0, 0.01, 0.02, 0.03, 0.04], Affine(10_000, 1_000), max_batch_size=8,
                           max_queue_delay_us=100_000, warmup=0.0)
    lane = lane_from_result(res, "dyn", slots=8, delay_s=0.1)
    assert lane.kind == "dynamic"
    f = frame_at(lane, 0.05)
    assert f.queue_len == 5 and f.window == pytest.approx(0.5) and f.batch_size == 0
    f = frame_at(lane, 0.11)  # batch started at 0.1 and lasts 15 ms
    assert f.batch_size == 5 and f.queue_len == 0
    np.testing.assert_allclose(f.gpu_progress, (0.11 - 0.1) / 0.015)
    busy, fill = utilization(lane, 0.0, 0.2)
    assert busy == pytest.approx(0.015 / 0.2)
    assert fill == pytest.approx(0.015 * 5 / (8 * 0.2))


def test_static_and_continuous_lanes() -> None:
    cost = TokenCost(prefill_per_token=100, decode_base=10_000, decode_per_seq=1_000)
    a, p, o = [0.0, 0.0], [4, 4], [2, 10]
    st = lane_from_result(simulate_static_generation(a, p, o, cost, max_batch_size=2, warmup=0.0), "static", 2, 0.0)
    assert st.kind == "static" and st.b_useful[0] < 1.0  # padding: the 2-token request waits for the 10-token one
    mid = (st.b_start[0] + st.b_end[0]) / 2
    f = frame_at(st, mid)
    assert list(f.gpu_padding) == [True, False]
    co = lane_from_result(simulate_continuous(a, p, o, cost, max_active=2, warmup=0.0), "cont", 2, 0.0)
    assert co.kind == "continuous" and np.all(co.b_useful == 1.0)
    f = frame_at(co, float(co.finish[0]) + 1e-6)  # the short one has left; the long one decodes on
    assert list(f.gpu_ids) == [1] and not f.gpu_padding.any()


def test_lane_from_result_refuses_unknown_results() -> None:
    class Fake:
        scheduler = "sequence"

    with pytest.raises(ValueError, match="cannot animate"):
        lane_from_result(Fake(), "x", 1, 0.0)


def test_demo_is_seeded_and_tells_the_story() -> None:
    lanes = run_demo(DemoParams(rate=4.0, n_requests=40))
    again = run_demo(DemoParams(rate=4.0, n_requests=40))
    assert [lane.kind for lane in lanes] == ["static", "static", "continuous"]
    for x, y in zip(lanes, again):
        np.testing.assert_array_equal(x.finish, y.finish)
    nob, dyn, con = lanes
    assert np.all(nob.b_size == 1) and dyn.b_size.max() > 1
    lat = [np.mean(lane.finish - lane.arrival) for lane in lanes]
    assert lat[0] > lat[1] > lat[2]  # one pot per dish is slowest, continuous batching fastest
    h = default_horizon(lanes)
    assert dyn.end <= h <= 1.5 * nob.arrival.max() + 1e-9
    # the no-batching pot never holds more than one of its eight slots
    assert utilization(nob, 0.0, float(nob.arrival.max()))[1] <= 1 / 8 + 1e-9


def test_demo_params_are_checked() -> None:
    with pytest.raises(ValueError, match="rate"):
        DemoParams(rate=0)
    with pytest.raises(ValueError, match="max_batch_size"):
        DemoParams(max_batch_size=0)
    with pytest.raises(ValueError, match="max_queue_delay_ms"):
        DemoParams(max_queue_delay_ms=-1)


def test_sweeps_back_the_chapter_00_conclusions() -> None:
    from batchlab.viz import stateless_sweep, utilization_sweep

    gen = {(r["rate"], r["lane"]): r for r in utilization_sweep([1, 8, 12])}
    # light load: nothing to batch, every kitchen's pot is nearly empty
    assert all(gen[(1.0, k)]["fill"] < 0.1 for k in range(3))
    # no batching: fill never above 1/8 however busy the GPU is
    assert gen[(12.0, 0)]["busy"] > 0.99 and gen[(12.0, 0)]["fill"] <= 1 / 8 + 1e-9
    # request-level batches are capped by padding; continuous batching passes 80 % while stable
    assert gen[(12.0, 1)]["fill"] < 0.7 and gen[(12.0, 1)]["eta"] < 0.7
    assert gen[(12.0, 2)]["fill"] > 0.8 and gen[(12.0, 2)]["latency_mean_s"] < 1.0
    st = {(r["rate"], r["lane"]): r for r in stateless_sweep([20, 260])}
    assert st[(260.0, 0)]["fill"] <= 1 / 8 + 1e-9 and st[(260.0, 1)]["fill"] > 0.8
    assert st[(20.0, 1)]["fill"] < 0.1
