"""Seeded service-time variability (`Lognormal`, `Resampled`, `ResampledSteps`): mean kept, tail heavier, reproducible, fixed time the default."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.sim import Affine, Lognormal, Resampled, ResampledSteps, TokenCost, simulate_continuous, simulate_dynamic
from batchlab.sim.workload import poisson

BASE = Affine(2000.0, 150.0)


def _arr(rate: float = 1500.0, n: int = 20000, seed: int = 1) -> np.ndarray:
    return poisson(rate, n, seed=seed)


def test_draws_have_the_mean_and_cv_asked_for() -> None:
    draw = Lognormal(BASE, 0.4, seed=3).sampler()
    x = np.array([draw(8) for _ in range(40000)])
    assert x.mean() == pytest.approx(BASE.time(8), rel=0.01)
    assert x.std() / x.mean() == pytest.approx(0.4, rel=0.03)


def test_same_seed_same_run_other_seed_other_run() -> None:
    a = _arr()
    r1 = simulate_dynamic(a, Lognormal(BASE, 0.3, seed=5), 16).summary()
    r2 = simulate_dynamic(a, Lognormal(BASE, 0.3, seed=5), 16).summary()
    r3 = simulate_dynamic(a, Lognormal(BASE, 0.3, seed=6), 16).summary()
    assert r1 == r2 and r1 != r3


def test_cv_zero_is_the_fixed_time_model() -> None:
    a = _arr()
    fixed = simulate_dynamic(a, BASE, 16).summary()
    zero = simulate_dynamic(a, Lognormal(BASE, 0.0), 16).summary()
    assert zero["throughput_rps"] == pytest.approx(fixed["throughput_rps"], rel=1e-9)
    for key in ("p50", "p99"):
        assert zero["latency_ms"][key] == pytest.approx(fixed["latency_ms"][key], rel=1e-9), key


def test_variability_fattens_the_tail_not_the_throughput() -> None:
    a = _arr(rate=2500.0)
    fixed = simulate_dynamic(a, BASE, 16)
    var = simulate_dynamic(a, Lognormal(BASE, 0.5, seed=2), 16)
    sf, sv = fixed.summary(), var.summary()
    assert sv["latency_ms"]["p99"] > 1.2 * sf["latency_ms"]["p99"]
    assert sv["throughput_rps"] == pytest.approx(sf["throughput_rps"], rel=0.03)


def test_fit_recovers_cv() -> None:
    rng = np.random.default_rng(0)
    sigma = np.sqrt(np.log1p(0.25 ** 2))
    samples = {b: BASE.time(b) * 1e6 * rng.lognormal(-sigma ** 2 / 2, sigma, 400) for b in (1, 4, 16)}
    assert Lognormal.fit(BASE, samples).cv == pytest.approx(0.25, rel=0.08)


@pytest.mark.parametrize("kwargs, message", [
    (dict(mean=BASE, cv=-0.1), "cv"),
    (dict(mean="fast", cv=0.1), "service must be"),
    (dict(mean=Lognormal(BASE, 0.1), cv=0.1), "fixed-time model"),
])
def test_bad_arguments_are_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Lognormal(**kwargs)


def test_fast_engine_refuses_variable_times() -> None:
    with pytest.raises(ValueError, match="fast engine"):
        simulate_dynamic(_arr(n=100), Lognormal(BASE, 0.2), 16, engine="fast")


def test_fit_needs_two_samples() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        Lognormal.fit(BASE, {4: [100.0]})


def test_resampled_keeps_the_mean_and_the_measured_shape() -> None:
    ratios = [0.8, 0.9, 1.0, 1.1, 3.0]
    svc = Resampled(BASE, ratios, seed=4)
    assert svc.time(8) == BASE.time(8) and np.mean(svc.ratios) == pytest.approx(1.0)
    draw = svc.sampler()
    x = np.array([draw(8) for _ in range(20000)]) / BASE.time(8)
    assert set(np.round(x, 9)) <= set(np.round(np.array(ratios) / np.mean(ratios), 9))
    assert x.mean() == pytest.approx(1.0, rel=0.02)
    assert svc.cv == pytest.approx(np.std(np.array(ratios) / np.mean(ratios)))


def test_resampled_is_seeded_in_the_simulator() -> None:
    a = _arr()
    ratios = list(np.random.default_rng(0).lognormal(0, 0.4, 500))
    r1 = simulate_dynamic(a, Resampled(BASE, ratios, seed=5), 16).summary()
    r2 = simulate_dynamic(a, Resampled(BASE, ratios, seed=5), 16).summary()
    r3 = simulate_dynamic(a, Resampled(BASE, ratios, seed=6), 16).summary()
    assert r1 == r2 and r1 != r3
    with pytest.raises(ValueError, match="fast engine"):
        simulate_dynamic(a[:100], Resampled(BASE, ratios), 16, engine="fast")


def test_resampled_fit_divides_by_the_mean_model() -> None:
    samples = {1: [BASE.time(1) * 1e6 * 2], 4: [BASE.time(4) * 1e6 * 1, BASE.time(4) * 1e6 * 3]}
    svc = Resampled.fit(BASE, samples)
    assert sorted(svc.ratios) == pytest.approx([0.5, 1.0, 1.5])


def test_block_resampling_keeps_runs_of_slow_executions_together() -> None:
    # measured in time order: 200 normal executions, then 200 slow ones
    seq = [(4, BASE.time(4) * 1e6 * (1.0 if k < 200 else 2.0)) for k in range(400)]
    blocks = Resampled.fit_sequence(BASE, seq, block=50, seed=1)
    assert blocks.block == 50 and blocks.ratios[0] < blocks.ratios[-1]  # order kept
    draw = blocks.sampler()
    x = np.array([draw(4) for _ in range(5000)]) / BASE.time(4)
    lag1 = np.corrcoef(np.log(x[:-1]), np.log(x[1:]))[0, 1]
    assert lag1 > 0.8  # consecutive draws come from the same stretch of the measured sequence
    iid = Resampled(BASE, blocks.ratios, seed=1).sampler()
    y = np.array([iid(4) for _ in range(5000)]) / BASE.time(4)
    assert abs(np.corrcoef(np.log(y[:-1]), np.log(y[1:]))[0, 1]) < 0.1
    assert x.mean() == pytest.approx(1.0, rel=0.05) and y.mean() == pytest.approx(1.0, rel=0.05)
    # the same marginal shape, but a queue builds behind a run of slow executions: a heavier tail
    a = _arr(rate=2500.0, n=30000, seed=2)
    p99 = [float(np.percentile(simulate_dynamic(a, m, 16).to_arrays()["latency"], 99))
           for m in (Resampled(BASE, blocks.ratios, seed=3), Resampled(BASE, blocks.ratios, seed=3, block=50))]
    assert p99[1] > 1.2 * p99[0]
    with pytest.raises(ValueError, match="block"):
        Resampled(BASE, [1.0, 2.0], block=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(mean=BASE, ratios=[1.0]), "at least 2"),
    (dict(mean=BASE, ratios=[1.0, -2.0]), "ratios"),
    (dict(mean=Lognormal(BASE, 0.1), ratios=[1.0, 2.0]), "fixed-time model"),
])
def test_resampled_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Resampled(**kwargs)


def test_decode_table_cost_uses_its_table_then_the_linear_terms() -> None:
    from batchlab.sim import DecodeTableCost

    c = DecodeTableCost(prefill_per_token=100.0, decode_base=1000.0, decode_per_seq=500.0, context_per_token=1.0,
                        decode_us=(1200.0, 1500.0))
    assert c.iteration_time(0, 1) == pytest.approx(1200e-6)
    assert c.iteration_time(10, 2, 50) == pytest.approx((1500 + 1000 + 50) * 1e-6)  # table + prefill + context
    assert c.iteration_time(0, 3) == pytest.approx((1000 + 1500) * 1e-6)  # beyond the table: linear
    assert c.iteration_time(8, 0) == pytest.approx((1000 + 800) * 1e-6)  # prefill only: linear
    assert c.padded_decode_time(2, 4, 2) == pytest.approx(c.iteration_time(0, 2, 10) + c.iteration_time(0, 2, 12))
    with pytest.raises(ValueError, match="decode_us"):
        DecodeTableCost(prefill_per_token=1.0, decode_base=1.0, decode_per_seq=1.0, decode_us=(1.0, float("nan")))


STEP = TokenCost(prefill_per_token=50.0, decode_base=2000.0, decode_per_seq=400.0, context_per_token=1.0)


def _cb_workload(n: int = 3000, rate: float = 35.0, seed: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return poisson(rate, n, seed=seed), rng.integers(9, 26, n), rng.integers(1, 60, n)


def test_resampled_steps_keep_the_mean_step_and_are_seeded() -> None:
    steps = ResampledSteps(STEP, (0.5, 1.0, 1.5, 3.0), seed=2)
    assert sum(steps.ratios) / 4 == pytest.approx(1.0)  # rescaled to mean 1
    assert steps.iteration_time(10, 3, 40) == STEP.iteration_time(10, 3, 40)  # the mean model's time
    a, b = steps.sampler(), steps.sampler()
    xa = [a() for _ in range(200)]
    assert xa == [b() for _ in range(200)] and set(xa) <= set(steps.ratios)
    arr, p, o = _cb_workload()
    kw = dict(max_active=8, warmup=0.0)
    fixed = simulate_continuous(arr, p, o, STEP, **kw)
    flat = simulate_continuous(arr, p, o, ResampledSteps(STEP, (1.0, 1.0)), **kw)  # no spread: the fixed model
    assert np.array_equal(fixed.batches["end"], flat.batches["end"])
    flat_ctx = TokenCost(prefill_per_token=50.0, decode_base=2000.0, decode_per_seq=400.0)  # no context term
    var = simulate_continuous(arr, p, o, ResampledSteps(flat_ctx, steps.ratios, seed=2), **kw)
    dur = var.batches["end"] - var.batches["start"]
    mean = np.array([flat_ctx.iteration_time(int(pt), int(d)) for pt, d in
                     zip(var.batches["prefill_tokens"], var.batches["decode_seqs"])])
    x = dur / mean  # each step: its mean time times one of the ratios, about equally often
    assert np.isclose(x[:, None], np.array(steps.ratios)[None, :]).any(axis=1).all()
    assert x.mean() == pytest.approx(1.0, rel=0.05)
    again = simulate_continuous(arr, p, o, ResampledSteps(flat_ctx, steps.ratios, seed=2), **kw)
    assert np.array_equal(var.records["finish"], again.records["finish"])


def test_resampled_steps_in_blocks_fatten_the_ttft_tail() -> None:
    # measured in time order: 300 normal steps, then 300 slow ones, then 300 normal
    seq = [(0, 4, 100, STEP.iteration_time(0, 4, 100) * 1e6 * (2.0 if 300 <= k < 600 else 1.0)) for k in range(900)]
    blocks = ResampledSteps.fit_sequence(STEP, seq, block=100, seed=1)
    assert blocks.block == 100 and blocks.ratios[0] < blocks.ratios[400]  # order kept
    arr, p, o = _cb_workload(rate=44.0)
    ttft = [np.nanpercentile(simulate_continuous(arr, p, o, m, max_active=8).records["first_token"]
                             - arr, 99) for m in (STEP, ResampledSteps(STEP, blocks.ratios, seed=1), blocks)]
    assert ttft[2] > 1.2 * ttft[1] > 1.2 * ttft[0]  # a run of slow steps queues more than scattered ones


@pytest.mark.parametrize("kwargs, message", [
    (dict(mean=BASE, ratios=[1.0, 2.0]), "TokenCost"),
    (dict(mean=STEP, ratios=[1.0]), "at least 2"),
    (dict(mean=STEP, ratios=[1.0, 0.0]), "ratios"),
    (dict(mean=STEP, ratios=[1.0, 2.0], block=0), "block"),
])
def test_resampled_steps_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ResampledSteps(**kwargs)


def test_continuous_simulator_refuses_a_batch_level_model() -> None:
    with pytest.raises(ValueError, match="TokenCost"):
        simulate_continuous([0.0], [9], [3], BASE, max_active=8)
