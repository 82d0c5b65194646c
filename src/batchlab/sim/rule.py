"""The dynamic batcher's queue policy, `QueuePolicy` (``ModelQueuePolicy``), and, re-exported from
their home `batchlab.batching.dynamic`, the batcher's settings (`BatchRule`), its decision
(`next_batch`, `Decision`) and the queued request (`QueuedRequest`).
"""

from __future__ import annotations

from dataclasses import dataclass

from batchlab._validate import choice, integer, non_negative
from batchlab.batching.dynamic import BatchRule, Decision, QueuedRequest, next_batch

__all__ = ["BatchRule", "Decision", "QueuePolicy", "QueuedRequest", "next_batch"]


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy``: ``max_queue_size`` (0 = unbounded), ``timeout_us`` (0 = none) and
    ``timeout_action`` (REJECT drops a request that waited longer; DELAY moves it behind its level's
    other requests, never to time out again)."""

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
