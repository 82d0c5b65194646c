"""Batch-service queueing results (batchlab.theory.queueing) against closed forms and each other."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchlab.theory.formulas import heavy_load_wait, md1_wait
from batchlab.theory.queueing import (
    bailey_queue,
    bailey_roots,
    batch_queue,
    lambert_w,
    little_wait,
    unbounded_latency,
    unbounded_latency_bound,
    window_wait,
)


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9, 0.97])
def test_chain_with_batch_one_is_md1(rho):
    T = 0.004
    r = batch_queue(rho / T, (T, 0.0), 1)
    assert r.wait_s == pytest.approx(md1_wait(rho / T, T), rel=1e-6)
    assert r.latency_s == pytest.approx(r.wait_s + T, rel=1e-9)
    assert r.utilization == pytest.approx(rho, rel=1e-6)


@pytest.mark.parametrize("k,rho", [(2, 0.3), (4, 0.8), (8, 0.95), (16, 0.5)])
def test_chain_matches_bailey_roots_for_constant_batch_time(k, rho):
    T = 0.01
    lam = rho * k / T
    chain = batch_queue(lam, (T, 0.0), k)
    closed = bailey_queue(lam, T, k)
    assert chain.wait_s == pytest.approx(closed.wait_s, rel=1e-6)
    assert chain.p_idle == pytest.approx(closed.p_empty, abs=1e-9)
    assert chain.throughput_rps == pytest.approx(lam, rel=1e-6)


def test_bailey_roots_solve_the_equation_inside_the_disk():
    mu, k = 5.0, 8
    z = bailey_roots(mu, k)
    assert z.size == k - 1
    assert np.all(np.abs(z) < 1)
    assert np.allclose(z ** k, np.exp(mu * (z - 1)), atol=1e-12)


def test_bailey_bus_rule_at_capacity_one_adds_half_a_slot():
    lam, T = 50.0, 0.01
    bus = bailey_queue(lam, T, 1, rule="bus")
    assert bus.wait_s == pytest.approx(md1_wait(lam, T) + T / 2, rel=1e-9)


@pytest.mark.parametrize("lam", [20.0, 200.0, 600.0, 900.0])
def test_unbounded_chain_satisfies_the_exact_mean_relations_and_the_bound(lam):
    a, b = 0.005, 0.001
    chain = batch_queue(lam, (a, b), None)
    exact = unbounded_latency(lam, a, b, chain.p_idle)
    assert exact["latency_s"] == pytest.approx(chain.latency_s, rel=1e-7)
    assert exact["batch_mean"] == pytest.approx(chain.batch_mean, rel=1e-7)
    bound = unbounded_latency_bound(lam, a, b)
    assert bound["p_star"] <= chain.p_idle + 1e-12
    assert chain.latency_s <= bound["latency_s"] * (1 + 1e-9)
    assert bound["latency_s"] <= chain.latency_s * 1.05  # and it is tight


def test_bound_is_exact_for_constant_batch_time():
    lam, a = 80.0, 0.01
    bound = unbounded_latency_bound(lam, a, 0.0)
    assert bound["p_star"] == pytest.approx(math.exp(-lam * a))
    # the shuttle: E[D] = a + λa² / (2(λa + e^{-λa}))
    assert bound["latency_s"] == pytest.approx(a + lam * a * a / (2 * (lam * a + math.exp(-lam * a))))


def test_lambert_w():
    for x in (0.0, 1e-6, 0.5, 1.0, 10.0, 1e4):
        w = lambert_w(x)
        assert w * math.exp(w) == pytest.approx(x, rel=1e-12, abs=1e-15)


def test_window_wait_limits():
    # no size limit: (D + λD²/2)/(1 + λD)
    lam, d = 30.0, 0.02
    r = window_wait(lam, d, None)
    assert r.wait_s == pytest.approx((d + lam * d * d / 2) / (1 + lam * d))
    assert r.batch_mean == pytest.approx(1 + lam * d)
    # a huge batch limit behaves like none; a limit of one never waits; a light load waits ~D
    assert window_wait(lam, d, 10_000).wait_s == pytest.approx(r.wait_s, rel=1e-6)  # sums 10^4 terms
    assert window_wait(lam, d, 1).wait_s == 0.0
    assert window_wait(0.01, d, 8).wait_s == pytest.approx(d, rel=1e-3)
    # a small limit closes the window early
    assert window_wait(2000.0, d, 2).window_s < d / 10


def test_little_wait_reduces_to_the_article_formula():
    assert little_wait(12, 0.02, 8) == pytest.approx(heavy_load_wait(12, 0.02, 8))
    assert little_wait(12, 0.02, 8, utilization=0.5) == pytest.approx(2 * heavy_load_wait(12, 0.02, 8))


def test_errors_are_clear():
    with pytest.raises(ValueError, match="unstable"):
        batch_queue(500.0, (0.01, 0.0), 4)
    with pytest.raises(ValueError, match="max_batch_size"):
        batch_queue(10.0, (0.01, 0.0), 0)
    with pytest.raises(ValueError, match="batch_time"):
        batch_queue(10.0, "fast", 4)
    with pytest.raises(ValueError, match="unstable"):
        bailey_queue(500.0, 0.01, 4)
    with pytest.raises(ValueError, match="rule"):
        bailey_queue(5.0, 0.01, 4, rule="train")
    with pytest.raises(ValueError, match="utilization"):
        little_wait(1, 1, 1, utilization=1.5)


def test_accepts_simulator_service_models():
    service = pytest.importorskip("batchlab.sim.service")
    svc = service.Affine(base_us=5000, per_item_us=1000)
    a = batch_queue(300.0, svc, 8)
    b = batch_queue(300.0, (0.005, 0.001), 8)
    assert a.wait_s == pytest.approx(b.wait_s, rel=1e-12)
