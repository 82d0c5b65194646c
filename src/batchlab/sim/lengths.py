"""Token-length distributions for prompts and outputs: each has ``.sample(n, rng)`` and ``.mean``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from batchlab._validate import integer, positive, rng_of


class LengthDist:
    """Base class: a distribution of positive integer token counts."""

    def sample(self, n: int, rng: int | np.random.Generator | None = None) -> np.ndarray:
        """``n`` lengths as an int64 array; ``rng`` is a seed or a numpy Generator."""
        raise NotImplementedError

    @property
    def mean(self) -> float:
        """Exact mean of the distribution."""
        raise NotImplementedError

    @property
    def max(self) -> int:
        """Largest possible length."""
        raise NotImplementedError


@dataclass(frozen=True)
class Uniform(LengthDist):
    """Integers uniform on ``[lo, hi]`` (both included)."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        _check_bounds(self, "hi")

    def sample(self, n: int, rng: int | np.random.Generator | None = None) -> np.ndarray:
        n = integer("n", n, lo=0)
        return rng_of(rng).integers(self.lo, self.hi + 1, size=n, dtype=np.int64)

    @property
    def mean(self) -> float:
        return (self.lo + self.hi) / 2.0

    @property
    def max(self) -> int:
        return self.hi


def _check_bounds(dist: LengthDist, top: str) -> None:
    """Validate and normalise a distribution's integer bounds ``lo <= top`` (field `top`: hi or cap; in place, frozen)."""
    lo = integer("lo", dist.lo, lo=1)
    hi = integer(top, getattr(dist, top), lo=1)
    if hi < lo:
        raise ValueError(f"{top} must be >= lo, got lo={lo}, {top}={hi}")
    object.__setattr__(dist, "lo", lo)
    object.__setattr__(dist, top, hi)


@dataclass(frozen=True)
class CappedExponential(LengthDist):
    """ceil(X), X exponential with mean ``mean_tokens``, clipped to ``[lo, cap]``; `.mean` is the exact mean drawn."""

    mean_tokens: float
    cap: int
    lo: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean_tokens", positive("mean", self.mean_tokens))
        _check_bounds(self, "cap")

    def sample(self, n: int, rng: int | np.random.Generator | None = None) -> np.ndarray:
        n = integer("n", n, lo=0)
        x = np.ceil(rng_of(rng).exponential(self.mean_tokens, size=n))
        return np.clip(x, self.lo, self.cap).astype(np.int64)

    @property
    def mean(self) -> float:
        # E[L] = sum_{k=1}^{cap} P(L >= k); P(L >= k) = 1 for k <= lo, else P(X > k-1) = q^(k-1).
        q = math.exp(-1.0 / self.mean_tokens)
        tail = (q**self.lo - q**self.cap) / (1.0 - q) if self.cap > self.lo else 0.0
        return float(self.lo + tail)

    @property
    def max(self) -> int:
        return self.cap


@dataclass(frozen=True)
class CappedLognormal(LengthDist):
    """ceil(X), X lognormal (``median``, log-spread ``sigma``: p90/p50 = exp(1.2816·sigma)), clipped to
    ``[lo, cap]``: the shape of chat replies. `.mean` is the exact mean drawn."""

    median: float
    sigma: float
    cap: int
    lo: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "median", positive("median", self.median))
        object.__setattr__(self, "sigma", positive("sigma", self.sigma))
        _check_bounds(self, "cap")

    def sample(self, n: int, rng: int | np.random.Generator | None = None) -> np.ndarray:
        n = integer("n", n, lo=0)
        x = np.ceil(rng_of(rng).lognormal(math.log(self.median), self.sigma, size=n))
        return np.clip(x, self.lo, self.cap).astype(np.int64)

    def _survival(self, x: float) -> float:
        """P(X > x) for the underlying lognormal."""
        return 0.5 * math.erfc((math.log(x) - math.log(self.median)) / (self.sigma * math.sqrt(2.0)))

    @property
    def mean(self) -> float:
        # E[L] = sum_{k=1}^{cap} P(L >= k); P(L >= k) = 1 for k <= lo, else P(X > k-1).
        return float(self.lo + sum(self._survival(k - 1) for k in range(self.lo + 1, self.cap + 1)))

    @property
    def max(self) -> int:
        return self.cap


@dataclass(frozen=True)
class Empirical(LengthDist):
    """Lengths resampled (with replacement) from observed values (e.g. a real trace), optionally weighted."""

    values: tuple[int, ...]
    weights: tuple[float, ...] | None = None
    _v: np.ndarray = field(init=False, repr=False, compare=False)
    _p: np.ndarray | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        v = np.asarray(self.values)
        if v.ndim != 1 or v.size == 0:
            raise ValueError("values must be a non-empty 1-D sequence of token counts")
        if not np.issubdtype(v.dtype, np.number) or not np.all(np.isfinite(v)) or not np.all(v == np.round(v)):
            raise ValueError("values must be integers")
        v = v.astype(np.int64)
        if v.min() < 1:
            raise ValueError(f"values must all be >= 1, found {int(v.min())}")
        p = None
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            if w.shape != v.shape or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise ValueError("weights must be non-negative, finite, not all zero, one per value")
            p = w / w.sum()
            object.__setattr__(self, "weights", tuple(float(x) for x in w))
        object.__setattr__(self, "values", tuple(int(x) for x in v))
        object.__setattr__(self, "_v", v)
        object.__setattr__(self, "_p", p)

    def sample(self, n: int, rng: int | np.random.Generator | None = None) -> np.ndarray:
        n = integer("n", n, lo=0)
        return rng_of(rng).choice(self._v, size=n, replace=True, p=self._p)

    @property
    def mean(self) -> float:
        return float(self._v.mean() if self._p is None else (self._v * self._p).sum())

    @property
    def max(self) -> int:
        return int(self._v.max())


@dataclass(frozen=True)
class Fixed(LengthDist):
    """Every length equal to ``k``."""

    k: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", integer("k", self.k, lo=1))

    def sample(self, n: int, rng: int | np.random.Generator | None = None) -> np.ndarray:
        return np.full(integer("n", n, lo=0), self.k, dtype=np.int64)

    @property
    def mean(self) -> float:
        return float(self.k)

    @property
    def max(self) -> int:
        return self.k


uniform, capped_exponential, capped_lognormal = Uniform, CappedExponential, CappedLognormal
empirical, fixed = Empirical, Fixed
