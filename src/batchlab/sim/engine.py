"""The event-driven core: a heap of timed events (arrivals stay in their sorted array, merged by each scheduler)."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterator

INF = float("inf")


class EventQueue:
    """A min-heap of ``(time, kind, data)`` events; ties pop in insertion order."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, kind: int, data: Any = None) -> None:
        """Schedule an event of ``kind`` at ``time``."""
        heapq.heappush(self._heap, (time, next(self._seq), kind, data))

    def peek_time(self) -> float:
        """Time of the earliest event (inf when empty)."""
        return self._heap[0][0] if self._heap else INF

    def pop_due(self, now: float) -> Iterator[tuple[int, Any]]:
        """Pop and yield ``(kind, data)`` of every event at or before ``now``, earliest first."""
        h = self._heap
        while h and h[0][0] <= now:
            _, _, kind, data = heapq.heappop(h)
            yield kind, data

