"""Triton's dynamic-batcher decision (``GetDynamicBatch`` in core ``src/dynamic_batch_scheduler.cc``).

When a model instance can take work and requests are pending, the batcher looks at the first
``n = min(pending, max_batch_size)`` requests in queue order (each request here is one batch
element) and:

1. if some preferred size ``s <= n`` exists and the oldest of those ``n`` requests has not
   waited ``max_queue_delay``, sends the largest such ``s`` (so a count that reaches the largest
   preferred size is sent at once; with 7 pending and preferred [4, 8], 4 are sent);
2. else, if the delay is 0 or the oldest has waited at least the delay, sends all ``n``;
3. else waits for the next arrival or for the oldest's deadline (arrival + delay).

An empty ``preferred_batch_size`` means ``[max_batch_size]`` (Triton's config normaliser does
this). With the delay 0 the delay is never "exceeded", so rule 1 applies whenever a preferred
size is reachable. Requests keep arriving while every instance is busy, so the pending batch
grows until an instance takes it.

Modelling choice, stated once here: decisions are taken at the moment an instance can take work
(batcher.md's description). Triton's implementation pre-forms payloads while instances are busy
(up to 2 × instances, core ``rate_limiter.cc``) and keeps growing the one being formed; that
gives the same batches whenever ``preferred_batch_size`` is empty (or only
``[max_batch_size]``), the setting batcher.md recommends. With several preferred sizes and
busy instances Triton can close a payload at the first preferred size it reaches (with delay 0),
where this model sends the largest preferred size pending when the instance frees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from batchlab._validate import choice, integer, non_negative


@dataclass(frozen=True)
class BatchRule:
    """``max_batch_size``, ``preferred_batch_size`` and ``max_queue_delay_microseconds`` as one rule."""

    max_batch_size: int
    preferred: tuple[int, ...] = ()
    max_queue_delay_us: float = 0.0
    best: tuple[int, ...] = field(init=False, repr=False)
    min_preferred: int = field(init=False, repr=False)
    max_preferred: int = field(init=False, repr=False)
    delay_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        m = integer("max_batch_size", self.max_batch_size, lo=1)
        pref = normalise_preferred(self.preferred, m)
        d = non_negative("max_queue_delay_us", self.max_queue_delay_us)
        best = [0] * (m + 1)
        cur = 0
        for k in range(m + 1):
            if k in pref:
                cur = k
            best[k] = cur
        object.__setattr__(self, "max_batch_size", m)
        object.__setattr__(self, "preferred", pref)
        object.__setattr__(self, "max_queue_delay_us", d)
        object.__setattr__(self, "best", tuple(best))
        object.__setattr__(self, "min_preferred", pref[0])
        object.__setattr__(self, "max_preferred", pref[-1])
        object.__setattr__(self, "delay_s", d * 1e-6)

    def decide(self, n: int, oldest_arrival: float, now: float) -> tuple[int, float]:
        """Batch size to send now (``(size, now)``), or ``(0, deadline)`` to wait until a deadline.

        ``n`` is ``min(pending, max_batch_size)`` (>= 1); ``oldest_arrival`` is the earliest
        arrival among those ``n`` requests. An arrival before the deadline also re-triggers the
        decision (the caller's job).
        """
        b = self.best[n]
        d = self.delay_s
        if d == 0.0:
            return (b if b else n), now
        deadline = oldest_arrival + d
        if now >= deadline:
            return n, now
        if b:
            return b, now
        return 0, deadline

    def overload_batch(self) -> int:
        """The batch size sent when the queue is long: max preferred with delay 0, else max_batch_size."""
        return self.max_preferred if self.delay_s == 0.0 else self.max_batch_size


def normalise_preferred(preferred: Sequence[int] | None, max_batch_size: int) -> tuple[int, ...]:
    """Sorted unique preferred sizes, each in ``[1, max_batch_size]``; empty means ``(max_batch_size,)``."""
    if preferred is None:
        preferred = ()
    if isinstance(preferred, (int,)) and not isinstance(preferred, bool):
        preferred = (preferred,)
    sizes = sorted({integer("preferred_batch_sizes entry", p, lo=1) for p in preferred})
    if sizes and sizes[-1] > max_batch_size:
        raise ValueError(
            f"preferred_batch_sizes entry {sizes[-1]} exceeds max_batch_size {max_batch_size}"
        )
    return tuple(sizes) if sizes else (max_batch_size,)


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy``: ``max_queue_size`` (0 = unbounded), ``default_timeout_microseconds``
    (0 = none) and ``timeout_action`` (REJECT drops a request that waited longer than the timeout
    before being scheduled; DELAY moves it behind the requests of its priority level that have not
    timed out). Delayed requests do not time out again (core ``scheduler_utils.cc``).
    """

    max_queue_size: int = 0
    timeout_us: float = 0.0
    timeout_action: str = "REJECT"

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_queue_size", integer("max_queue_size", self.max_queue_size, lo=0))
        object.__setattr__(self, "timeout_us", non_negative("default_timeout_us", self.timeout_us))
        object.__setattr__(self, "timeout_action",
                           choice("timeout_action", self.timeout_action, ("REJECT", "DELAY")))

    @property
    def is_default(self) -> bool:
        """True when the policy never rejects, times out or reorders."""
        return self.max_queue_size == 0 and self.timeout_us == 0.0
