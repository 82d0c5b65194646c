"""batchlab.sim against queueing theory: M/D/1 (Pollaczek–Khinchine), Lindley, Little's law, capacity.

Sizing: with 1,000,000 requests the seed-to-seed spread of the M/D/1 mean wait is about 0.45 %
(ρ = 0.5) and 0.55 % (ρ = 0.7), so the 2 % bound is about four standard deviations.
"""

import numpy as np
import pytest

from batchlab.sim import workload as wl
from batchlab.sim.dynamic import simulate_dynamic
from batchlab.sim.service import Affine

S = 1e-3  # deterministic service time, seconds


@pytest.mark.parametrize("rho, seed", [(0.5, 101), (0.7, 102)])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho, seed):
    mu = 1 / S
    a = wl.poisson(rho * mu, 1_000_000, seed=seed)
    res = simulate_dynamic(a, Affine(0, S * 1e6), max_batch_size=1, max_queue_delay_us=0)
    s = res.summary()
    wq = rho / (2 * mu * (1 - rho))
    assert s["queue_ms"]["mean"] / 1e3 == pytest.approx(wq, rel=0.02)
    assert s["latency_ms"]["mean"] / 1e3 == pytest.approx(wq + S, rel=0.02)
    assert s["utilization"] == pytest.approx(rho, rel=0.01)
    assert s["batch_size_hist"] == {1: s["executions"]}
    # the M/M/1 wait (twice as long) must not pass: the test can tell the two apart
    assert abs(s["queue_ms"]["mean"] / 1e3 - rho / (mu * (1 - rho))) > 0.2 * wq


def test_md1_equals_lindley_recursion_exactly():
    # one server, deterministic S: start_i = max(a_i, start_{i-1} + S), i.e. i·S + cummax(a_i - i·S)
    a = wl.poisson(800.0, 200_000, seed=5)
    i = np.arange(a.size)
    lindley = i * S + np.maximum.accumulate(a - i * S)
    res = simulate_dynamic(a, Affine(0, S * 1e6), 1)
    assert np.allclose(res.records["start"], lindley, rtol=0, atol=1e-9)


@pytest.mark.parametrize("cfg", [
    dict(max_batch_size=1),
    dict(max_batch_size=8, max_queue_delay_us=500),
    dict(max_batch_size=16, preferred_batch_sizes=(4, 8), instances=2, max_queue_delay_us=100),
])
def test_littles_law(cfg):
    a = wl.poisson(1500.0, 200_000, seed=7)  # rho 0.68 unbatched: stationary for every config
    res = simulate_dynamic(a, Affine(300, 150), **cfg)
    r = res.to_arrays()
    # exact over the whole run (the system starts and ends empty): ∫Q(t)dt = Σ waits
    t = np.sort(np.r_[r["arrival"], r["start"]])
    q = res.queue_length_at(t[:-1])
    assert np.sum(q * np.diff(t)) == pytest.approx(np.sum(r["queue"]), rel=1e-9)
    # and as an estimate: time-average number waiting / in system, sampled on a grid, = λ·W
    lo, hi = a[20_000], a[-20_000]
    grid = np.linspace(lo, hi, 400_001)
    sel = (r["arrival"] >= lo) & (r["arrival"] <= hi)
    lam = sel.sum() / (hi - lo)
    assert res.queue_length_at(grid).mean() == pytest.approx(lam * r["queue"][sel].mean(), rel=0.03)
    assert res.in_system_at(grid).mean() == pytest.approx(lam * r["latency"][sel].mean(), rel=0.03)


def test_overload_throughput_is_capacity_and_run_still_ends():
    svc = Affine(300, 100)
    a = wl.poisson(50_000.0, 200_000, seed=8)  # about 7 x capacity
    res = simulate_dynamic(a, svc, 8)
    s = res.summary()
    cap = 8 / svc.time(8)
    assert res.capacity_rps == pytest.approx(cap)
    assert s["throughput_rps"] == pytest.approx(cap, rel=0.001)
    assert s["stable"] is False and s["rho"] > 6
    assert s["batch_size_mean"] == pytest.approx(8, abs=0.01)
    # two instances double it; with a delay the overload batch is max_batch_size, with preferred
    # sizes and no delay it is the largest preferred size
    s2 = simulate_dynamic(a, svc, 8, instances=2).summary()
    assert s2["throughput_rps"] == pytest.approx(2 * cap, rel=0.001)
    s3 = simulate_dynamic(a, svc, 8, preferred_batch_sizes=(4,)).summary()
    assert s3["throughput_rps"] == pytest.approx(4 / svc.time(4), rel=0.001)


@pytest.mark.parametrize("rho, stable", [(0.95, True), (1.05, False)])
def test_stability_flag(rho, stable):
    a = wl.poisson(rho / S, 200_000, seed=9)
    s = simulate_dynamic(a, Affine(0, S * 1e6), 1).summary()
    assert s["stable"] is stable
    assert s["rho"] == pytest.approx(rho, rel=0.01)


def test_growth_is_detected_without_rho():
    from batchlab.sim.summary import growing

    rng = np.random.default_rng(0)
    flat = rng.exponential(1.0, 10_000)
    assert not growing(flat, 0.1)
    assert growing(np.linspace(0, 100, 10_000) + flat, 0.1)


def test_batching_beats_no_batching_under_load():
    # 2,500 req/s is beyond one unbatched instance (1/400 us) but easy for batches of 8
    svc = Affine(300, 100)
    a = wl.poisson(2500.0, 100_000, seed=10)
    nb = simulate_dynamic(a, svc, 1).summary()
    db = simulate_dynamic(a, svc, 8).summary()
    assert nb["stable"] is False and db["stable"] is True
    assert db["latency_ms"]["p99"] < 5
