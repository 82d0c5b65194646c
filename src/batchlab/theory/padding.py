"""The padding efficiency η = Σ L_i / (B · L_max) of a static batch: its exact expectation for i.i.d.
lengths from a discrete distribution, and a Monte Carlo check.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from batchlab._validate import count, rng_of


@dataclass(frozen=True)
class LengthPMF:
    """A discrete length distribution: strictly increasing positive ``values`` and their ``probs``."""

    values: tuple[int, ...]
    probs: tuple[float, ...]
    exact: tuple[Fraction, ...] | None = None  # the same probabilities as fractions, when known

    @property
    def mean(self) -> float:
        """E[L]."""
        return float(np.dot(self.values, self.probs))

    @property
    def max(self) -> int:
        """The largest length with positive probability."""
        return int(self.values[-1])


def _pmf(values: Sequence[int], probs: Sequence[float] | None, exact: Sequence[Fraction] | None = None) -> LengthPMF:
    v = np.asarray(values)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("values must be a non-empty 1-D sequence of lengths")
    if not np.issubdtype(v.dtype, np.number) or np.any(v != np.round(v)) or np.any(v < 1):
        raise ValueError("values must be positive integers (token counts)")
    if probs is None:
        p = np.full(v.size, 1.0 / v.size)
        exact = [Fraction(1, v.size)] * v.size
    else:
        p = np.asarray(probs, dtype=float)
        if p.shape != v.shape or np.any(~np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
            raise ValueError("probs must be non-negative, finite, not all zero, one per value")
        p = p / p.sum()
    order = np.argsort(v, kind="stable")
    v, p = v[order].astype(np.int64), p[order]
    if np.any(np.diff(v) == 0):
        raise ValueError("values must be distinct")
    keep = p > 0
    ex = None if exact is None else tuple(Fraction(exact[i]) for i, k in zip(order, keep) if k)
    return LengthPMF(tuple(int(x) for x in v[keep]), tuple(float(x) for x in p[keep]), ex)


def uniform_pmf(lo: int, hi: int) -> LengthPMF:
    """Integers uniform on [lo, hi], both included: the article's ``random.randint(lo, hi)``."""
    if not (isinstance(lo, (int, np.integer)) and isinstance(hi, (int, np.integer))) or lo < 1 or hi < lo:
        raise ValueError(f"need integers 1 <= lo <= hi, got lo={lo!r}, hi={hi!r}")
    return _pmf(range(int(lo), int(hi) + 1), None)


def _capped(lo: int, cap: int, surv: Any) -> LengthPMF:
    """L = clip(ceil(X), lo, cap) with S(k) = `surv(k)` = P(X > k): P(L = k) = S(k−1) − S(k) inside,
    1 − S(lo) at lo and S(cap − 1) at cap."""
    ks = np.arange(lo, cap + 1)
    s = np.array([surv(float(k)) for k in ks])
    prev = np.concatenate([[1.0], s[:-1]])
    p = prev - s
    p[0] = 1.0 - s[0]
    p[-1] = prev[-1] if cap > lo else 1.0
    return _pmf(ks, p)


def pmf_of(dist: Any, probs: Sequence[float] | None = None) -> LengthPMF:
    """A `LengthPMF` from a `LengthPMF`, a ``(lo, hi)`` pair (uniform integers), values (with optional
    ``probs``, else equally likely) or a ``batchlab.sim.lengths`` distribution (by its fields)."""
    if isinstance(dist, LengthPMF):
        return dist
    name = type(dist).__name__
    if name == "Uniform" and hasattr(dist, "lo") and hasattr(dist, "hi"):
        return uniform_pmf(int(dist.lo), int(dist.hi))
    if name == "Fixed" and hasattr(dist, "k"):
        return LengthPMF((int(dist.k),), (1.0,), (Fraction(1),))
    if name == "Empirical" and hasattr(dist, "values"):
        vals, where = np.unique(np.asarray(dist.values), return_inverse=True)
        w = np.ones(len(dist.values)) if dist.weights is None else np.asarray(dist.weights, dtype=float)
        return _pmf(vals, np.bincount(where, weights=w))
    if name == "CappedExponential" and hasattr(dist, "mean_tokens"):
        q = float(np.exp(-1.0 / dist.mean_tokens))
        return _capped(int(dist.lo), int(dist.cap), lambda k: q ** k)
    if name == "CappedLognormal" and hasattr(dist, "median") and hasattr(dist, "sigma"):
        return _capped(int(dist.lo), int(dist.cap), lambda k: 0.5 * math.erfc(
            (math.log(k) - math.log(dist.median)) / (dist.sigma * math.sqrt(2.0))))
    if isinstance(dist, tuple) and len(dist) == 2 and probs is None and all(
            isinstance(x, (int, np.integer)) for x in dist):
        return uniform_pmf(int(dist[0]), int(dist[1]))
    if isinstance(dist, (list, tuple, np.ndarray)):
        return _pmf(dist, probs)
    raise ValueError(f"cannot read a length distribution from {type(dist).__name__}; "
                     "pass (lo, hi), a list of values, a LengthPMF or a batchlab.sim length distribution")


def _max_pmf(cdf: np.ndarray, n: int) -> np.ndarray:
    """pmf of the maximum of n i.i.d. draws, on the support, from the cumulative probabilities."""
    return np.diff(cdf ** n, prepend=0.0)


def expected_eta(dist: Any, batch_size: int, exact: bool = False) -> float | Fraction:
    """E[η] for a batch of ``batch_size`` i.i.d. lengths from ``dist`` (see `pmf_of`), exactly.

    By exchangeability E[η] = E[L_1 / L_max] = Σ_l Σ_m p(l) q_{B-1}(m) · l / max(l, m), with
    q_{B-1}(m) = F(m)^{B-1} − F(m⁻)^{B-1} the law of the longest of the other B − 1 (η = 1 for
    B = 1); not E[L] / E[L_max] (`ratio_of_expectations`). With ``exact=True`` and probabilities
    known as fractions (uniform ones), the result is a `fractions.Fraction`.
    """
    pmf = pmf_of(dist)
    b = count("batch_size", batch_size)
    if b == 1:
        return Fraction(1) if exact else 1.0
    if exact:
        if pmf.exact is None:
            raise ValueError("exact=True needs probabilities known as fractions (e.g. uniform_pmf)")
        vals, p = pmf.values, pmf.exact
        up = [c ** (b - 1) for c in itertools.accumulate(p)]
        q = [up[0]] + [up[i] - up[i - 1] for i in range(1, len(up))]
        return sum(pl * sum(qm * Fraction(n, max(n, m)) for qm, m in zip(q, vals)) for pl, n in zip(p, vals))
    v = np.asarray(pmf.values, dtype=float)
    p = np.asarray(pmf.probs)
    q = _max_pmf(np.cumsum(p), b - 1)
    ratio = v[:, None] / np.maximum(v[:, None], v[None, :])
    return float(p @ ratio @ q)


def steps_paid_quantile(dist: Any, batch_size: int, q: float) -> int:
    """The q-quantile of the steps a member of a padded batch computes (its batch's L_max): the
    smallest x with F(x)^B ≥ q. With ``batch_size`` 1 (continuous batching) the quantile of L."""
    pmf = pmf_of(dist)
    b = count("batch_size", batch_size)
    if not 0 < q <= 1:
        raise ValueError(f"q must lie in (0, 1], got {q!r}")
    cdf = np.cumsum(pmf.probs) ** b
    i = int(np.searchsorted(cdf, q - 1e-12, side="left"))
    return int(pmf.values[min(i, len(pmf.values) - 1)])


def expected_max(dist: Any, batch_size: int) -> float:
    """E[L_max] for ``batch_size`` i.i.d. lengths: Σ_m m · (F(m)^B − F(m⁻)^B)."""
    pmf = pmf_of(dist)
    b = count("batch_size", batch_size)
    q = _max_pmf(np.cumsum(pmf.probs), b)
    return float(np.dot(pmf.values, q))


def ratio_of_expectations(dist: Any, batch_size: int) -> float:
    """E[Σ L_i] / E[B · L_max] = E[L] / E[L_max]: the tempting shortcut, *not* E[η]."""
    pmf = pmf_of(dist)
    return pmf.mean / expected_max(pmf, batch_size)


def eta_limit(dist: Any) -> float:
    """lim_{B→∞} E[η] = E[L] / max L: a huge static batch almost surely holds the longest length."""
    pmf = pmf_of(dist)
    return pmf.mean / pmf.max


def eta_of_batches(lengths: np.ndarray) -> np.ndarray:
    """η of each row of a (batches × B) array of lengths."""
    x = np.asarray(lengths, dtype=float)
    if x.ndim != 2 or x.size == 0 or np.any(x <= 0):
        raise ValueError("lengths must be a non-empty 2-D array (batches × batch size) of positive numbers")
    return x.sum(axis=1) / (x.shape[1] * x.max(axis=1))


@dataclass(frozen=True)
class MonteCarloEta:
    """Monte Carlo estimate of E[η]: ``mean`` ± ``stderr`` over ``n_batches`` simulated batches."""

    mean: float
    stderr: float
    n_batches: int
    batch_size: int

    def covers(self, value: float, z: float = 4.0) -> bool:
        """True when ``value`` lies within ``z`` standard errors of the estimate."""
        return abs(self.mean - value) <= z * self.stderr


def monte_carlo_eta(dist: Any, batch_size: int, n_batches: int = 20_000,
                    seed: int | np.random.Generator | None = 0) -> MonteCarloEta:
    """Mean η of ``n_batches`` random batches from ``dist`` (anything `pmf_of` reads; one with a
    ``sample(n, rng)`` method is sampled directly)."""
    b = count("batch_size", batch_size)
    count("n_batches", n_batches, lo=2)
    rng = rng_of(seed)
    n = int(n_batches) * b
    if callable(getattr(dist, "sample", None)):
        draws = np.asarray(dist.sample(n, rng), dtype=float)
    else:
        pmf = pmf_of(dist)
        draws = rng.choice(np.asarray(pmf.values, dtype=float), size=n, p=np.asarray(pmf.probs))
    eta = eta_of_batches(draws.reshape(int(n_batches), b))
    return MonteCarloEta(float(eta.mean()), float(eta.std(ddof=1) / np.sqrt(eta.size)), int(n_batches), b)
