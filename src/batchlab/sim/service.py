"""Service-time models, given in microseconds (as Triton's statistics), returning seconds: one execution
of ``b`` batch elements (`Affine`, `Table`) or one LLM forward pass from its token counts (`TokenCost`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from batchlab._validate import integer, non_negative, times_array

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
    """t(b) = base_us + per_item_us * b (microseconds): a fixed cost per execution plus a cost per item."""

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
    """Batch times measured at some batch sizes, interpolated linearly (flat below the smallest, the last
    segment's slope, never decreasing, above the largest); ``unit`` of ``times``: "us", "ms" or "s"."""

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


def service_times(service: BatchService, b: np.ndarray) -> np.ndarray:
    """Seconds for each batch size in ``b`` under any batch-level service model."""
    fn = getattr(service, "batch_times", None)
    if callable(fn):
        return np.asarray(fn(np.asarray(b)), dtype=np.float64)
    return np.asarray([service.time(int(x)) for x in np.asarray(b).tolist()], dtype=np.float64)


def service_table(service: BatchService, max_batch_size: int) -> np.ndarray:
    """t(B) for B = 0 .. max_batch_size (index = batch elements), each finite and > 0 from B = 1."""
    svc = service_times(service, np.arange(max_batch_size + 1))
    if np.any(svc[1:] <= 0) or not np.all(np.isfinite(svc[1:])):
        raise ValueError("service times must be finite and > 0 for every batch size up to max_batch_size")
    return svc


def check_batch_service(service: object) -> None:
    """Raise ``ValueError`` unless ``service`` has a ``time(b)`` method."""
    if not callable(getattr(service, "time", None)) or isinstance(service, TokenCost):
        raise ValueError(
            f"service must be a batch-level model such as Affine or Table, got {type(service).__name__}"
        )


@dataclass(frozen=True)
class TokenCost:
    """Time of one LLM forward pass from its token counts (µs): decode_base (the fixed cost, reading the
    weights) + prefill_per_token·(prompt tokens computed) + decode_per_seq·(sequences decoding one
    token) + context_per_token·(KV tokens those decoding sequences attend to)."""

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
        """Seconds for ``steps`` padded decode steps of ``batch`` sequences after a ``max_prompt`` prefill."""
        if steps <= 0:
            return 0.0
        ctx = batch * (steps * max_prompt + steps * (steps + 1) // 2)
        return (steps * (self.decode_base + self.decode_per_seq * batch) + self.context_per_token * ctx) * US

    def padded_batch_time(self, batch: int, max_prompt: int, max_output: int) -> float:
        """Seconds for a request-level (static) batch: padded prefill, then ``max_output - 1`` padded steps."""
        return self.padded_prefill_time(batch, max_prompt) + self.padded_decode_time(batch, max_prompt, max_output - 1)
