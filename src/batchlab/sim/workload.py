"""Arrival processes (sorted times in seconds) and, re-exported from `batchlab.sim.lengths`, token lengths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from batchlab._validate import integer, non_negative, positive, rng_of, times_array
from .lengths import LengthDist, capped_exponential, empirical, fixed, uniform

__all__ = [
    "poisson", "constant", "rate_curve", "diurnal", "trace",
    "uniform", "capped_exponential", "empirical", "fixed", "Requests", "with_lengths",
]


def poisson(rate: float, n: int, seed: int | np.random.Generator | None = None, start: float = 0.0) -> np.ndarray:
    """``n`` Poisson arrivals at ``rate`` per second: exponential gaps, the first one after ``start``."""
    rate = positive("rate", rate)
    n = integer("n", n, lo=0)
    return float(start) + np.cumsum(rng_of(seed).exponential(1.0 / rate, size=n))


def constant(rate: float, n: int, start: float = 0.0) -> np.ndarray:
    """``n`` evenly spaced arrivals ``1/rate`` apart, the first at ``start``."""
    rate = positive("rate", rate)
    n = integer("n", n, lo=0)
    return float(start) + np.arange(n, dtype=np.float64) / rate


def rate_curve(
    fn_or_array: Callable[[np.ndarray], np.ndarray] | Sequence[float] | np.ndarray,
    duration: float,
    seed: int | np.random.Generator | None = None,
    resolution: int = 20_000,
) -> np.ndarray:
    """Non-homogeneous Poisson arrivals over ``[0, duration)`` from a rate curve (requests/s): a function
    of time (called on bin midpoints) or rates for equal bins (e.g. 24 hourly rates), piecewise
    constant, drawn exactly by time-rescaling; the count is Poisson with mean ∫rate."""
    duration = positive("duration", duration)
    resolution = integer("resolution", resolution, lo=1)
    if callable(fn_or_array):
        edges = np.linspace(0.0, duration, resolution + 1)
        mid = 0.5 * (edges[:-1] + edges[1:])
        try:
            rates = np.asarray(fn_or_array(mid), dtype=np.float64)
        except Exception:  # a scalar-only function
            rates = np.asarray([float(fn_or_array(float(x))) for x in mid])
        if rates.shape != mid.shape:
            rates = np.broadcast_to(rates, mid.shape).astype(np.float64)
    else:
        rates = np.asarray(fn_or_array, dtype=np.float64)
        if rates.ndim != 1 or rates.size == 0:
            raise ValueError("the rate array must be 1-D and non-empty")
        edges = np.linspace(0.0, duration, rates.size + 1)
    if not np.all(np.isfinite(rates)) or np.any(rates < 0):
        raise ValueError("rates must be finite and >= 0")
    cum = np.concatenate([[0.0], np.cumsum(rates * np.diff(edges))])
    total = float(cum[-1])
    rng = rng_of(seed)
    if total <= 0:
        return np.empty(0)
    k = int(rng.poisson(total))
    u = np.sort(rng.random(k) * total)
    return np.interp(u, cum, edges)


def diurnal(trough_rps: float, peak_rps: float, period_s: float = 86_400.0,
            peak_at_s: float = 14 * 3600.0) -> Callable[[np.ndarray], np.ndarray]:
    """A day-shaped rate function for `rate_curve`: a cosine from ``trough_rps`` up to ``peak_rps`` at ``peak_at_s``."""
    lo = non_negative("trough_rps", trough_rps)
    hi = positive("peak_rps", peak_rps)
    if hi < lo:
        raise ValueError("peak_rps must be >= trough_rps")
    period = positive("period_s", period_s)
    peak_at = float(peak_at_s)

    def rate(t: np.ndarray) -> np.ndarray:
        return lo + (hi - lo) * 0.5 * (1.0 + np.cos(2.0 * np.pi * (np.asarray(t) - peak_at) / period))

    return rate


def trace(times: Sequence[float] | np.ndarray, start_at_zero: bool = False) -> np.ndarray:
    """Replay recorded arrival times (seconds): validated, sorted, optionally shifted to start at 0."""
    a = np.sort(times_array("times", times, sorted_required=False))
    if start_at_zero and a.size:
        a = a - a[0]
    if a.size and a[0] < 0:
        raise ValueError("trace times must be >= 0 (pass start_at_zero=True to shift them)")
    return a


@dataclass(frozen=True)
class Requests:
    """Arrival times with each request's prompt and output token counts (for LLM schedulers)."""

    arrival: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return int(self.arrival.size)


def with_lengths(arrivals: np.ndarray, prompt: LengthDist, output: LengthDist,
                 seed: int | np.random.Generator | None = None) -> Requests:
    """Attach prompt and output lengths drawn from two distributions to arrival times."""
    a = times_array("arrivals", arrivals)
    rng = rng_of(seed)
    for name, dist in (("prompt", prompt), ("output", output)):
        if not isinstance(dist, LengthDist):
            raise ValueError(f"{name} must be a length distribution (uniform, capped_exponential, empirical, fixed)")
    return Requests(a, prompt.sample(a.size, rng), output.sample(a.size, rng))
