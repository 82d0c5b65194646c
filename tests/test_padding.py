"""Exact and Monte Carlo expectation of the padding efficiency η (batchlab.theory.padding)."""

from __future__ import annotations

from fractions import Fraction
from itertools import product

import numpy as np
import pytest

from batchlab.sim.lengths import CappedLognormal
from batchlab.theory.formulas import padding_efficiency
from batchlab.theory.padding import (
    eta_limit,
    eta_of_batches,
    expected_eta,
    expected_max,
    monte_carlo_eta,
    pmf_of,
    ratio_of_expectations,
    steps_paid_quantile,
    uniform_pmf,
)


def brute_force_eta(values, batch_size):
    """E[η] by enumerating every equally likely batch (tiny supports only)."""
    total = Fraction(0)
    count = 0
    for batch in product(values, repeat=batch_size):
        total += Fraction(sum(batch), batch_size * max(batch))
        count += 1
    return total / count


@pytest.mark.parametrize("lo,hi,b", [(1, 3, 2), (2, 5, 3), (5, 9, 4), (1, 1, 3)])
def test_exact_matches_enumeration(lo, hi, b):
    assert expected_eta(uniform_pmf(lo, hi), b, exact=True) == brute_force_eta(range(lo, hi + 1), b)


def test_float_and_fraction_agree_for_article_distribution():
    d = uniform_pmf(5, 50)
    for b in (2, 4, 8, 32):
        assert float(expected_eta(d, b, exact=True)) == pytest.approx(expected_eta(d, b), rel=1e-12)


def test_batch_of_one_is_fully_efficient():
    assert expected_eta((5, 50), 1) == 1.0
    assert expected_eta(uniform_pmf(5, 50), 1, exact=True) == 1


def test_monte_carlo_agrees_with_exact_and_ratio_differs():
    d = uniform_pmf(5, 50)
    exact = expected_eta(d, 4)
    mc = monte_carlo_eta(d, 4, n_batches=40_000, seed=1)
    assert mc.covers(exact)
    # the ratio of expectations is a different number, outside the Monte Carlo band
    assert not mc.covers(ratio_of_expectations(d, 4), z=2.0)
    assert ratio_of_expectations(d, 4) < exact


def test_curve_decreases_to_the_limit():
    d = uniform_pmf(5, 50)
    curve = np.array([expected_eta(d, b) for b in (1, 2, 4, 8, 16, 64, 256)])
    assert np.all(np.diff(curve) < 0)
    assert eta_limit(d) == pytest.approx(27.5 / 50)
    assert curve[-1] == pytest.approx(eta_limit(d), abs=2e-3)


def test_expected_max_closed_form_for_two_draws():
    # E[max of two uniform draws on 1..n] = (n+1)(4n-1)/(6n)
    n = 10
    assert expected_max((1, n), 2) == pytest.approx((n + 1) * (4 * n - 1) / (6 * n))


def test_eta_of_batches_matches_formula():
    rows = np.array([[5, 10, 20], [7, 7, 7]])
    got = eta_of_batches(rows)
    assert got == pytest.approx([padding_efficiency(r) for r in rows])


def test_simulator_length_distributions_are_read():
    sim = pytest.importorskip("batchlab.sim.lengths")
    u = pmf_of(sim.uniform(5, 50))
    assert u.values[0] == 5 and u.values[-1] == 50 and u.mean == pytest.approx(27.5)
    ce = sim.capped_exponential(100, 512)
    p = pmf_of(ce)
    assert sum(p.probs) == pytest.approx(1.0)
    assert p.mean == pytest.approx(ce.mean, rel=1e-9)
    mc = monte_carlo_eta(ce, 8, n_batches=30_000, seed=2)
    assert mc.covers(expected_eta(ce, 8))


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_batch_size_is_one_clear_error(bad):
    with pytest.raises(ValueError, match="batch_size"):
        expected_eta((5, 50), bad)


def test_bad_distributions_are_refused():
    with pytest.raises(ValueError):
        uniform_pmf(10, 5)
    with pytest.raises(ValueError):
        pmf_of([0, 3])
    with pytest.raises(ValueError):
        pmf_of("lengths")
    with pytest.raises(ValueError, match="exact"):
        expected_eta(pmf_of([1, 2], probs=[0.3, 0.7]), 2, exact=True)


def test_steps_paid_quantile():
    d = uniform_pmf(5, 50)
    # one request alone pays its own length: the median of 5..50 is 27 (F(27) = 23/46 = 0.5)
    assert steps_paid_quantile(d, 1, 0.5) == 27
    # in a batch of 8 the median member pays L_max: F(x)^8 >= 0.5 first at x = 47
    assert steps_paid_quantile(d, 8, 0.5) == 47
    rng = np.random.default_rng(0)
    lmax = rng.integers(5, 51, size=(50_000, 8)).max(axis=1)
    assert np.percentile(lmax, 50, method="inverted_cdf") == 47
    assert steps_paid_quantile(d, 8, 0.99) == 50
    with pytest.raises(ValueError, match="q must"):
        steps_paid_quantile(d, 8, 0)


def test_pmf_of_capped_lognormal_matches_its_mean_and_samples():
    d = CappedLognormal(16.125, 0.929, 125)
    pm = pmf_of(d)
    vals, probs = np.asarray(pm.values), np.asarray(pm.probs)
    assert vals[0] == 1 and vals[-1] == 125 and abs(probs.sum() - 1) < 1e-12
    assert abs(pm.mean - d.mean) < 1e-9
    x = d.sample(200_000, 1)
    assert np.abs(np.bincount(x, minlength=126)[vals] / x.size - probs).max() < 0.005
