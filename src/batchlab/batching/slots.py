"""Triton's sequence batcher, the part chapter 03 shows: which batch slot a sequence owns, and what the
model sees in each slot (core ``src/sequence_batch_scheduler/sequence_batch_scheduler.cc``)."""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(slots=True)
class SequenceRequest:
    """One request of sequence ``seq`` (its step ``step``; ``last``: it carries the END flag), and what
    became of it: ``queued`` in a slot, batch ``start``, ``finish``, ``batch`` and ``instance`` it ran on."""

    seq: int
    step: int
    last: bool
    arrival: float
    queued: float = math.nan
    start: float = math.nan
    finish: float = math.nan
    batch: int = -1
    instance: int = -1
    rejected: bool = False


class SlotControl(NamedTuple):
    """The control inputs one batch slot carries to the model (``SetControlTensors``)."""

    start: int   # 1 on a sequence's first request: the model resets this slot's state
    end: int     # 1 on its last request: next time the slot may hold another sequence
    ready: int   # 0 in an empty slot run as padding: the model ignores that row
    corrid: int  # the sequence's correlation ID, from 1 (padding carries 0: no sequence)

    @classmethod
    def of(cls, request: SequenceRequest | None) -> SlotControl:
        """The controls of a slot holding ``request`` (None: padding)."""
        if request is None:
            return cls(0, 0, 0, 0)
        return cls(int(request.step == 0), int(request.last), 1, request.seq + 1)


class SequenceSlots:
    """``slots`` batch slots per instance. "direct": a sequence's requests run in its own slot; "oldest":
    the slot only ties the sequence to an instance. Silent ``idle_s`` seconds: force-ended (0: never)."""

    def __init__(self, strategy: str, instances: int, slots: int, idle_s: float) -> None:
        self.strategy, self.idle_s = strategy, idle_s
        # a slot is (number, instance); free ones in a heap, lowest number first (ready_batcher_seq_slots_)
        self.free = sorted((number, instance) for instance in range(instances) for number in range(slots))
        self.backlog: deque[SequenceRequest] = deque()  # first requests of sequences with no slot, FIFO
        self.slot_of: dict[int, tuple[int, int]] = {}     # sequence -> the slot it owns until it ends
        self.waiting = [{} for _ in range(instances)]  # per instance: slot number -> request, oldest first
        self.force_ended: set[int] = set()  # the idle reaper ended these: their next request is refused

    def arrive(self, request: SequenceRequest, now: float) -> int | None:
        """Queue ``request`` in its sequence's slot; returns the slot's instance, None if backlogged."""
        if request.seq not in self.slot_of:  # a new sequence (SequenceBatchScheduler::Enqueue)
            if self.backlog or not self.free:  # no free slot: wait behind earlier new sequences
                self.backlog.append(request)
                return None
            self.slot_of[request.seq] = heapq.heappop(self.free)  # the lowest free slot
        number, instance = self.slot_of[request.seq]
        request.queued = now
        self.waiting[instance][number] = request
        return instance

    def release(self, seq: int, now: float) -> int | None:
        """Free ``seq``'s slot: the first backlogged sequence takes it (``ReleaseSequenceSlot``)."""
        slot = self.slot_of.pop(seq)
        if not self.backlog:
            heapq.heappush(self.free, slot)
            return None
        request = self.backlog.popleft()
        self.slot_of[request.seq] = slot
        if self.idle_s and now >= request.arrival + self.idle_s and not request.last:
            self.force_ended.add(request.seq)  # its idle clock ran out in the backlog (ReaperThread)
        return self.arrive(request, now)

    def reap(self, request: SequenceRequest, now: float) -> int | None:
        """The idle reaper: ``request``, its sequence's latest, came ``idle_s`` ago (``ReaperThread``)."""
        if request.last or request.seq not in self.slot_of or request.seq in self.force_ended:
            return None  # END already sent, no slot yet (checked when it gets one), or ended already
        self.force_ended.add(request.seq)  # Triton queues a null request: the model is told nothing
        return None if math.isnan(request.finish) else self.release(request.seq, now)  # else: after it

    def finished(self, request: SequenceRequest, now: float) -> None:
        """``request`` completed: a force-ended sequence's or an oldest END's slot frees (CompleteAndNext)."""
        if request.seq in self.force_ended or (request.last and self.strategy == "oldest"):
            self.release(request.seq, now)

    def take(self, instance: int, now: float, size: int = 0) -> list[SequenceRequest | None]:
        """The next batch of ``instance``; oldest: ``size`` requests (the dynamic batcher's choice)."""
        waiting = self.waiting[instance]
        if self.strategy == "oldest":  # of distinct sequences, in any batch position, no padding
            return [waiting.pop(number) for number in list(waiting)[:size]]
        # direct: slots 0 … the highest ready one, in slot order; an empty slot runs as padding (None)
        batch = [waiting.pop(number, None) for number in range(max(waiting) + 1)]
        for request in batch:
            if request and request.last:  # an END taken frees its slot at once (BatcherThread)
                self.release(request.seq, now)
        return batch
