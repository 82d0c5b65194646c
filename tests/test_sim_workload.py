"""Workloads, length distributions and service-time models of batchlab.sim."""

import math

import numpy as np
import pytest

from batchlab.sim import workload as wl
from batchlab.sim.lengths import CappedExponential
from batchlab.sim.service import Affine, Table, TokenCost, service_times


def test_poisson_rate_and_gaps():
    a = wl.poisson(500.0, 200_000, seed=1)
    assert a.shape == (200_000,) and np.all(np.diff(a) >= 0) and a[0] > 0
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(1 / 500, rel=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)  # exponential: CV = 1
    assert np.array_equal(a, wl.poisson(500.0, 200_000, seed=1))  # seeded
    assert not np.array_equal(a, wl.poisson(500.0, 200_000, seed=2))


def test_constant():
    a = wl.constant(4.0, 5, start=1.0)
    assert np.allclose(a, [1.0, 1.25, 1.5, 1.75, 2.0])


def test_rate_curve_array_and_function():
    hourly = np.r_[np.full(12, 10.0), np.full(12, 30.0)]  # a "day" of 24 s: 10/s then 30/s
    a = wl.rate_curve(hourly, 24.0, seed=5)
    assert np.all(np.diff(a) >= 0) and a.min() >= 0 and a.max() < 24.0
    first, second = (a < 12).sum(), (a >= 12).sum()
    assert first == pytest.approx(120, abs=4 * math.sqrt(120))
    assert second == pytest.approx(360, abs=4 * math.sqrt(360))
    day = wl.diurnal(trough_rps=1.0, peak_rps=9.0)
    b = wl.rate_curve(day, 86_400.0, seed=6)
    assert b.size == pytest.approx(5.0 * 86_400, rel=0.01)  # mean rate (1 + 9) / 2
    peak = ((b > 13 * 3600) & (b < 15 * 3600)).sum()
    night = ((b > 1 * 3600) & (b < 3 * 3600)).sum()
    assert peak > 5 * night


def test_trace_replay():
    assert np.array_equal(wl.trace([3.0, 1.0, 2.0]), [1.0, 2.0, 3.0])
    assert np.array_equal(wl.trace([10.5, 11.0], start_at_zero=True), [0.0, 0.5])
    with pytest.raises(ValueError, match="finite"):
        wl.trace([0.0, float("nan")])
    with pytest.raises(ValueError, match=">= 0"):
        wl.trace([-1.0, 2.0])


@pytest.mark.parametrize("call, msg", [
    (lambda: wl.poisson(0, 10), "rate must be > 0"),
    (lambda: wl.poisson(1, -1), "n must be >= 0"),
    (lambda: wl.poisson(1, 2.5), "n must be an integer"),
    (lambda: wl.poisson(1, 10, seed=-3), "seed"),
    (lambda: wl.rate_curve([1.0, -1.0], 10.0), "rates must be finite"),
    (lambda: wl.uniform(5, 2), "hi must be >= lo"),
    (lambda: wl.capped_exponential(10, 0), "cap must be >= 1"),
    (lambda: wl.empirical([]), "non-empty"),
    (lambda: wl.empirical([1, 0]), ">= 1"),
])
def test_bad_workload_arguments(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_length_distributions():
    rng = np.random.default_rng(7)
    u = wl.uniform(5, 50).sample(100_000, rng)
    assert u.min() == 5 and u.max() == 50 and u.mean() == pytest.approx(27.5, rel=0.01)
    ce = wl.capped_exponential(100.0, 300)
    x = ce.sample(200_000, 8)
    assert x.min() >= 1 and x.max() == 300
    assert x.mean() == pytest.approx(ce.mean, rel=0.01)
    # the exact mean accounts for rounding up and for the cap
    assert CappedExponential(100.0, 10**9).mean == pytest.approx(1 / (1 - math.exp(-0.01)), rel=1e-9)
    e = wl.empirical([10, 20, 30], weights=[1, 0, 3])
    y = e.sample(100_000, 9)
    assert set(np.unique(y)) == {10, 30} and y.mean() == pytest.approx(e.mean, rel=0.01) and e.mean == 25.0
    assert np.all(wl.fixed(7).sample(4) == 7)


def test_with_lengths():
    r = wl.with_lengths(wl.constant(1.0, 100), wl.uniform(1, 3), wl.fixed(2), seed=1)
    assert len(r) == 100 and r.prompt_tokens.max() <= 3 and np.all(r.output_tokens == 2)


def test_affine_and_table():
    a = Affine(300, 100)
    assert a.time(8) == pytest.approx(1.1e-3)
    assert np.allclose(service_times(a, np.array([1, 2])), [4e-4, 5e-4])
    t = Table([1, 4, 8], [400, 700, 1100])
    assert t.time(1) == pytest.approx(4e-4)
    assert t.time(2) == pytest.approx(5e-4)  # interpolated
    assert t.time(6) == pytest.approx(9e-4)
    assert t.time(10) == pytest.approx(1.3e-3)  # last slope continued
    assert Table([4, 8], [1.0, 2.0], unit="ms").time(2) == pytest.approx(1e-3)  # flat below
    with pytest.raises(ValueError, match="strictly increasing"):
        Table([4, 2], [1, 2])
    with pytest.raises(ValueError, match="> 0"):
        Affine(0, 0)
    with pytest.raises(ValueError, match="unit"):
        Table([1], [1], unit="h")


def test_token_cost_padded_batch_matches_step_sum():
    c = TokenCost(prefill_per_token=10, decode_base=1000, decode_per_seq=50, context_per_token=0.5)
    b, p, o = 4, 100, 6
    steps = sum(c.iteration_time(0, b, b * (p + k)) for k in range(1, o))
    assert c.padded_batch_time(b, p, o) == pytest.approx(c.iteration_time(b * p, 0) + steps, rel=1e-12)
    assert c.padded_batch_time(b, p, 1) == pytest.approx(c.iteration_time(b * p, 0))
