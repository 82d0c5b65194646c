"""Service-time models: how long one model execution takes.

Times are given in microseconds (like Triton's statistics) and returned in seconds (the
simulator's clock). Batch-level models (`Affine`, `Table`) give the time of one execution of
``b`` batch elements; `TokenCost` gives the time of one LLM forward pass (an iteration) from its
token counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from batchlab._validate import integer, non_negative, rng_of, times_array

US = 1e-6  # seconds per microsecond


@runtime_checkable
class BatchService(Protocol):
    """Anything that gives the time (seconds) of one execution of ``b`` batch elements."""

    def time(self, b: int) -> float:
        """Seconds for one execution of a batch of ``b`` elements."""

    def batch_times(self, b: np.ndarray) -> np.ndarray:
        """Vectorised `time`: seconds for each batch size in ``b``."""


@dataclass(frozen=True)
class Affine:
    """t(b) = base_us + per_item_us * b (microseconds): a fixed cost per execution plus a cost per item.

    Inoue (arXiv 1912.06322) uses this form (α·b + τ₀) for GPU batch times.
    """

    base_us: float
    per_item_us: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_us", non_negative("base_us", self.base_us))
        object.__setattr__(self, "per_item_us", non_negative("per_item_us", self.per_item_us))
        if self.base_us + self.per_item_us <= 0:
            raise ValueError("base_us + per_item_us must be > 0 (an execution cannot take no time)")

    def time(self, b: int) -> float:
        """Seconds for a batch of ``b``."""
        return (self.base_us + self.per_item_us * b) * US

    def batch_times(self, b: np.ndarray) -> np.ndarray:
        """Seconds for each batch size in ``b``."""
        return (self.base_us + self.per_item_us * np.asarray(b, dtype=np.float64)) * US

    def throughput(self, b: int) -> float:
        """Requests per second one instance serves with full batches of ``b``."""
        return b / self.time(b)


@dataclass(frozen=True)
class Table:
    """Batch times measured at some batch sizes (on the real server or the toy LM), interpolated.

    Between measured sizes the time is linear; below the smallest measured size it is the
    smallest size's time; above the largest it continues the last segment's slope (never
    decreasing). ``unit`` is the unit of ``times``: "us" (default), "ms" or "s".
    """

    batch_sizes: tuple[int, ...]
    times: tuple[float, ...]
    unit: str = "us"
    _b: np.ndarray = field(init=False, repr=False, compare=False)
    _t: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        scale = {"us": US, "ms": 1e-3, "s": 1.0}.get(self.unit)
        if scale is None:
            raise ValueError(f"unit must be 'us', 'ms' or 's', got {self.unit!r}")
        sizes = [integer("batch_sizes entry", s, lo=1) for s in np.atleast_1d(np.asarray(self.batch_sizes)).tolist()]
        t = times_array("times", self.times, sorted_required=False)
        if len(sizes) == 0 or len(sizes) != t.size:
            raise ValueError(f"batch_sizes and times must be non-empty and of equal length ({len(sizes)} vs {t.size})")
        if any(b2 <= b1 for b1, b2 in zip(sizes, sizes[1:])):
            raise ValueError("batch_sizes must be strictly increasing")
        if np.any(t <= 0):
            raise ValueError("times must all be > 0")
        object.__setattr__(self, "batch_sizes", tuple(sizes))
        object.__setattr__(self, "times", tuple(float(x) for x in t))
        object.__setattr__(self, "_b", np.asarray(sizes, dtype=np.float64))
        object.__setattr__(self, "_t", t * scale)

    def batch_times(self, b: np.ndarray) -> np.ndarray:
        """Seconds for each batch size in ``b``."""
        x = np.asarray(b, dtype=np.float64)
        y = np.interp(x, self._b, self._t)
        if self._b.size >= 2:
            slope = max(0.0, (self._t[-1] - self._t[-2]) / (self._b[-1] - self._b[-2]))
            above = x > self._b[-1]
            y = np.where(above, self._t[-1] + slope * (x - self._b[-1]), y)
        return y

    def time(self, b: int) -> float:
        """Seconds for a batch of ``b``."""
        return float(self.batch_times(np.asarray([b]))[0])

    def throughput(self, b: int) -> float:
        """Requests per second one instance serves with full batches of ``b``."""
        return b / self.time(b)


class _AroundMean:
    """Shared by the variable batch-time models: `time`/`batch_times` give the mean model's times."""

    mean: BatchService

    def time(self, b: int) -> float:
        """Mean seconds for a batch of ``b``."""
        return self.mean.time(b)

    def batch_times(self, b: np.ndarray) -> np.ndarray:
        """Mean seconds for each batch size in ``b``."""
        return service_times(self.mean, b)


@dataclass(frozen=True)
class Lognormal(_AroundMean):
    """Batch times that vary from one execution to the next, seeded: t(b) · X with X lognormal, E[X] = 1.

    ``mean`` is a batch-level model (`Affine`, `Table`) giving the mean time of a batch of b;
    ``cv`` the coefficient of variation (standard deviation / mean) of one execution's time, one
    number for every batch size. `time` and `batch_times` return the mean (so capacity and the
    chapters' derivations are unchanged); the simulator calls `sampler` for one draw per
    execution, which is what gives the latency tail its weight. ``cv = 0`` is the fixed-time model.
    `fit` estimates ``cv`` from per-execution times measured on the server.
    """

    mean: BatchService
    cv: float
    seed: int = 0

    def __post_init__(self) -> None:
        check_batch_service(self.mean)
        if hasattr(self.mean, "sampler"):
            raise ValueError("mean must be a fixed-time model (Affine or Table), not another Lognormal")
        object.__setattr__(self, "cv", non_negative("cv", self.cv))
        object.__setattr__(self, "seed", integer("seed", self.seed, lo=0))

    def sampler(self) -> Callable[[int], float]:
        """A fresh seeded draw function ``draw(b) -> seconds``; the same seed gives the same sequence."""
        rng = rng_of(self.seed)
        sigma = float(np.sqrt(np.log1p(self.cv ** 2)))
        mu = -sigma ** 2 / 2
        mean = self.mean

        def draw(b: int) -> float:
            return mean.time(b) * float(rng.lognormal(mu, sigma))
        return draw

    @classmethod
    def fit(cls, mean: BatchService, samples_us: Mapping[int, Sequence[float]], seed: int = 0) -> "Lognormal":
        """Fit ``cv`` to measured execution times (microseconds) per batch size: the pooled standard
        deviation of log(time), sizes with at least 2 samples; ``sigma² = log(1 + cv²)``."""
        logs = [np.log(times_array(f"samples_us[{b}]", v, sorted_required=False)) for b, v in samples_us.items()]
        logs = [x for x in logs if x.size >= 2]
        if not logs:
            raise ValueError("samples_us needs at least 2 measured times for one batch size")
        if any(np.any(~np.isfinite(x)) for x in logs):
            raise ValueError("samples_us times must all be > 0")
        ss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
        dof = sum(x.size - 1 for x in logs)
        return cls(mean, float(np.sqrt(np.expm1(ss / dof))), seed)


def _ratios(name: str, ratios: Sequence[float]) -> tuple[float, ...]:
    """Measured time / mean-model time ratios, checked and rescaled to mean 1."""
    r = times_array(name, ratios, sorted_required=False)
    if r.size < 2 or np.any(r <= 0):
        raise ValueError(f"{name} needs at least 2 values, all > 0")
    return tuple(float(x) for x in r / r.mean())


def ratio_sampler(ratios: Sequence[float], block: int, seed: int) -> Callable[[], float]:
    """A fresh seeded draw function ``draw() -> ratio`` over measured ratios: with replacement
    (``block`` = 1), or ``block`` consecutive ones from each random start (a block bootstrap, which
    keeps runs of slow executions together). The same seed gives the same sequence."""
    rng = rng_of(seed)
    pool = np.asarray(ratios, dtype=np.float64)
    block = min(block, pool.size)
    if block == 1:
        return lambda: float(pool[rng.integers(pool.size)])
    at = [0, 0]  # next index, draws left in this block

    def draw_block() -> float:
        if at[1] == 0:
            at[0], at[1] = int(rng.integers(pool.size - block + 1)), block
        x = pool[at[0]]
        at[0] += 1
        at[1] -= 1
        return float(x)
    return draw_block


class _MeasuredRatios:
    """Shared by `Resampled` and `ResampledSteps`: measured ratios X (rescaled to mean 1), a seed and
    a block length for drawing them."""

    ratios: tuple[float, ...]
    seed: int
    block: int

    def _check_ratios(self) -> None:
        object.__setattr__(self, "ratios", _ratios("ratios", self.ratios))
        object.__setattr__(self, "seed", integer("seed", self.seed, lo=0))
        object.__setattr__(self, "block", integer("block", self.block, lo=1))

    @property
    def cv(self) -> float:
        """Coefficient of variation of X (of one execution's or step's time)."""
        return float(np.std(self.ratios))


@dataclass(frozen=True)
class Resampled(_AroundMean, _MeasuredRatios):
    """Batch times that vary like measured ones, seeded: t(b) · X with X drawn from measured ratios.

    ``ratios`` are measured execution times divided by the mean model's t(b) (any batch size),
    rescaled here to mean 1, so `time` and `batch_times` give the mean and capacity is unchanged;
    `sampler` draws X with replacement. Where a lognormal does not match the measured tail, this
    keeps its shape exactly (one shape for every batch size, like `Lognormal`'s one cv).
    `fit` builds it from per-execution times measured on the server.

    With ``block`` > 1 the ratios are taken in their given (measured) order, ``block`` consecutive
    ones from each random start (a block bootstrap): on a shared machine slow executions come in
    runs (measured here: lag-1 autocorrelation 0.24-0.69 of log time / t(b)), and a queue builds
    up behind a run of slow ones, which independent draws never produce. `fit_sequence` builds it
    from executions in time order.
    """

    mean: BatchService
    ratios: tuple[float, ...]
    seed: int = 0
    block: int = 1

    def __post_init__(self) -> None:
        check_batch_service(self.mean)
        if hasattr(self.mean, "sampler"):
            raise ValueError("mean must be a fixed-time model (Affine or Table), not a variable one")
        self._check_ratios()

    def sampler(self) -> Callable[[int], float]:
        """A fresh seeded draw function ``draw(b) -> seconds``; the same seed gives the same sequence."""
        factor = ratio_sampler(self.ratios, self.block, self.seed)
        mean = self.mean

        def draw(b: int) -> float:
            return mean.time(b) * factor()
        return draw

    @classmethod
    def fit(cls, mean: BatchService, samples_us: Mapping[int, Sequence[float]], seed: int = 0) -> "Resampled":
        """The ratios time / t(b) of measured execution times (microseconds) per batch size."""
        ratios = [times_array(f"samples_us[{b}]", v, sorted_required=False) * US / mean.time(int(b))
                  for b, v in samples_us.items()]
        r = np.concatenate(ratios) if ratios else np.empty(0)
        if r.size < 2:
            raise ValueError("samples_us needs at least 2 measured times")
        return cls(mean, tuple(r.tolist()), seed)

    @classmethod
    def fit_sequence(cls, mean: BatchService, sequence: Sequence[tuple[int, float]], block: int,
                     seed: int = 0) -> "Resampled":
        """The ratios time / t(b) of executions given in time order as (batch size, microseconds),
        kept in that order and drawn ``block`` at a time."""
        if len(sequence) < 2:
            raise ValueError("sequence needs at least 2 measured executions")
        r = [float(us) * US / mean.time(int(b)) for b, us in sequence]
        return cls(mean, tuple(r), seed, block)


def service_times(service: BatchService, b: np.ndarray) -> np.ndarray:
    """Seconds for each batch size in ``b`` under any batch-level service model."""
    fn = getattr(service, "batch_times", None)
    if callable(fn):
        return np.asarray(fn(np.asarray(b)), dtype=np.float64)
    return np.asarray([service.time(int(x)) for x in np.asarray(b).tolist()], dtype=np.float64)


def check_batch_service(service: object) -> None:
    """Raise ``ValueError`` unless ``service`` has a ``time(b)`` method."""
    if not callable(getattr(service, "time", None)) or isinstance(service, TokenCost):
        raise ValueError(
            f"service must be a batch-level model such as Affine or Table, got {type(service).__name__}"
        )


@dataclass(frozen=True)
class TokenCost:
    """Time of one LLM forward pass (an iteration) from its token counts, all in microseconds.

    t = decode_base + prefill_per_token·(prompt tokens computed) + decode_per_seq·(sequences
    decoding one token) + context_per_token·(KV tokens those decoding sequences attend to).

    ``decode_base`` is the fixed cost every forward pass pays (reading the weights); on a
    memory-bound decode it dominates, which is why batching decode pays off.
    """

    prefill_per_token: float
    decode_base: float
    decode_per_seq: float
    context_per_token: float = 0.0

    def __post_init__(self) -> None:
        for name in ("prefill_per_token", "decode_base", "decode_per_seq", "context_per_token"):
            object.__setattr__(self, name, non_negative(name, getattr(self, name)))
        if self.decode_base + self.decode_per_seq <= 0:
            raise ValueError("decode_base + decode_per_seq must be > 0 (a decode step cannot take no time)")

    def iteration_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int = 0) -> float:
        """Seconds for one forward pass."""
        return (
            self.decode_base
            + self.prefill_per_token * prefill_tokens
            + self.decode_per_seq * decode_seqs
            + self.context_per_token * context_tokens
        ) * US

    def padded_prefill_time(self, batch: int, max_prompt: int) -> float:
        """Seconds for the prefill of a padded batch: every member computes ``max_prompt`` tokens."""
        return self.iteration_time(batch * max_prompt, 0, 0)

    def padded_decode_time(self, batch: int, max_prompt: int, steps: int) -> float:
        """Seconds for ``steps`` padded decode steps of ``batch`` sequences after a ``max_prompt`` prefill.

        At decode step k (1-based) every sequence attends to ``max_prompt + k`` KV tokens.
        """
        if steps <= 0:
            return 0.0
        ctx = batch * (steps * max_prompt + steps * (steps + 1) // 2)
        return (steps * (self.decode_base + self.decode_per_seq * batch) + self.context_per_token * ctx) * US

    def padded_batch_time(self, batch: int, max_prompt: int, max_output: int) -> float:
        """Seconds for a request-level (static) batch: padded prefill, then ``max_output - 1`` padded steps."""
        return self.padded_prefill_time(batch, max_prompt) + self.padded_decode_time(batch, max_prompt, max_output - 1)


@dataclass(frozen=True)
class DecodeTableCost(TokenCost):
    """A `TokenCost` whose decode part is a measured table: a step with n decoding sequences pays
    ``decode_us[n - 1]`` (µs, the fixed cost included) instead of ``decode_base + decode_per_seq·n``;
    prefill and context tokens are charged linearly as in `TokenCost`. Sizes beyond the table, and
    steps with no decoding sequence, use the linear terms. For an engine whose step cost is not
    linear in the batch (a CPU's small-matrix paths, per-sequence response costs).
    """

    decode_us: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        vals = tuple(float(v) for v in self.decode_us)
        if any(not np.isfinite(v) or v <= 0 for v in vals):
            raise ValueError("decode_us entries must be finite and > 0")
        object.__setattr__(self, "decode_us", vals)

    def iteration_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int = 0) -> float:
        """Seconds for one forward pass."""
        if 0 < decode_seqs <= len(self.decode_us):
            return (self.decode_us[decode_seqs - 1] + self.prefill_per_token * prefill_tokens
                    + self.context_per_token * context_tokens) * US
        return super().iteration_time(prefill_tokens, decode_seqs, context_tokens)

    def padded_decode_time(self, batch: int, max_prompt: int, steps: int) -> float:
        """Seconds for ``steps`` padded decode steps of ``batch`` sequences (see `TokenCost`)."""
        return sum(self.iteration_time(0, batch, batch * (max_prompt + k)) for k in range(1, max(steps, 0) + 1))


@dataclass(frozen=True)
class ResampledSteps(_MeasuredRatios):
    """Forward-pass times that vary like measured ones, seeded: ``mean.iteration_time(...) · X``
    with X drawn from measured ratios (measured step duration / the `TokenCost`'s price for it).

    The continuous-batching counterpart of `Resampled`: `iteration_time` gives the mean model's
    (capacity and derivations unchanged); `simulate_continuous` calls `sampler` for one draw per
    iteration. ``ratios`` are rescaled to mean 1; with ``block`` > 1 they are drawn ``block``
    consecutive ones at a time in their measured order (runs of slow steps stay together, and so
    does a step measured long by a late token with the short one after it). `fit_sequence`
    builds it from steps in time order.
    """

    mean: TokenCost
    ratios: tuple[float, ...]
    seed: int = 0
    block: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.mean, TokenCost):
            raise ValueError(f"mean must be a TokenCost, got {type(self.mean).__name__}")
        self._check_ratios()

    def iteration_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int = 0) -> float:
        """Mean seconds for one forward pass (the mean model's)."""
        return self.mean.iteration_time(prefill_tokens, decode_seqs, context_tokens)

    def sampler(self) -> Callable[[], float]:
        """A fresh seeded draw function ``draw() -> X`` (multiply a step's mean time by it)."""
        return ratio_sampler(self.ratios, self.block, self.seed)

    @classmethod
    def fit_sequence(cls, mean: TokenCost, steps: Sequence[tuple[int, int, int, float]], block: int,
                     seed: int = 0) -> "ResampledSteps":
        """The ratios of steps given in time order as (prefill tokens, decoding sequences, context
        tokens, measured microseconds), kept in that order and drawn ``block`` at a time."""
        if len(steps) < 2:
            raise ValueError("steps needs at least 2 measured steps")
        r = [float(us) * US / mean.iteration_time(int(p), int(d), int(c)) for p, d, c, us in steps]
        return cls(mean, tuple(r), seed, block)
