"""Triton's sequence batcher: stateful sequences, one request per step, a client think time between steps.

The slots themselves (which slot a sequence owns, the backlog, the idle reaper, the batch a slot table
gives) are `batchlab.batching.slots.SequenceSlots`; this module is the event loop around them. ``strategy="direct"``: a
free instance runs slots 0 … highest ready slot in one batch, empty slots as padding; the slot frees
when the last request joins a batch. ``strategy="oldest"``: a dynamic batcher over the slots' requests;
the slot frees when the last request completes. A sequence idle ``max_sequence_idle_us`` after its last
request's arrival is force-ended (its next request rejected).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, non_negative, real, rng_of, times_array
from .results import SimResult, empty_records, make_batches
from .service import BatchService, check_batch_service, service_table
from batchlab.batching.dynamic import INF, BatchRule, QueuedRequest, next_batch
from batchlab.batching.slots import SequenceRequest, SequenceSlots

_SEND, _DONE, _WAKE, _IDLE = 0, 1, 2, 3  # event kinds: a client sends, an execution ends, a timer, the reaper


@dataclass(frozen=True)
class _Settings:
    """The checked arguments of `simulate_sequence`."""

    strategy: str
    max_batch_size: int
    instances: int
    slots: int                 # per instance: max_batch_size (direct) or max_candidate_sequences (oldest)
    think_s: float
    think: str
    min_slot_utilization: float
    idle_s: float
    delay_s: float             # direct's max_queue_delay (oldest's lives in ``rule``)
    rule: BatchRule | None     # oldest: the dynamic batcher's setting
    batch_time: list[float]    # seconds of one execution of b batch elements, b = 0 … max_batch_size


def simulate_sequence(
    starts: np.ndarray | Sequence[float],
    steps: np.ndarray | Sequence[int],
    service: BatchService,
    max_batch_size: int,
    strategy: str = "direct",
    instances: int = 1,
    think_time_s: float = 0.0,
    think: str = "constant",
    max_candidate_sequences: int = 0,
    preferred_batch_sizes: Sequence[int] = (),
    max_queue_delay_us: float = 0.0,
    minimum_slot_utilization: float = 0.0,
    max_sequence_idle_us: float = 1_000_000.0,
    seed: int | np.random.Generator | None = None,
    warmup: float = 0.1,
) -> SimResult:
    """Simulate sequences starting at sorted ``starts`` with ``steps[j]`` requests each.

    ``think``: "constant" or "exponential" (mean ``think_time_s``); ``max_sequence_idle_us`` 0 disables the reaper.
    """
    start_times = times_array("starts", starts)
    step_counts = int_array("steps", steps, start_times.size, lo=1)
    check_batch_service(service)
    settings = _check_settings(strategy, max_batch_size, instances, think_time_s, think, max_candidate_sequences,
                               preferred_batch_sizes, max_queue_delay_us, minimum_slot_utilization,
                               max_sequence_idle_us, service)
    run = _SequenceRun(settings, start_times.tolist(), step_counts.tolist(), rng_of(seed))
    run.run()
    s = settings
    config = dict(strategy=s.strategy, max_batch_size=s.max_batch_size, instances=s.instances,
                  think_time_s=s.think_s, think=s.think, slots_per_instance=s.slots,
                  max_queue_delay_us=float(max_queue_delay_us), minimum_slot_utilization=s.min_slot_utilization,
                  max_sequence_idle_us=float(max_sequence_idle_us),
                  preferred_batch_sizes=list(s.rule.effective_preferred) if s.rule else [], service=repr(service))
    # whole-run counts; each force-ended sequence also shows as one rejected request
    return SimResult(run.records(), run.batch_records(), f"sequence_{s.strategy}", config, instances=s.instances,
                     capacity_rps=None, warmup=warmup,
                     extra={"eta": "slots", "summary_extra": {
                         "sequences": start_times.size, "sequences_aborted": len(run.slots.force_ended)}})


def _check_settings(strategy: str, max_batch_size: int, instances: int, think_time_s: float, think: str,
                    max_candidate_sequences: int, preferred_batch_sizes: Sequence[int],
                    max_queue_delay_us: float, minimum_slot_utilization: float, max_sequence_idle_us: float,
                    service: BatchService) -> _Settings:
    """`simulate_sequence`'s settings, each checked (one clear ValueError for a bad one)."""
    strategy = choice("strategy", strategy, ("direct", "oldest"))
    max_batch_size = integer("max_batch_size", max_batch_size, lo=1)
    instances = integer("instances", instances, lo=1)
    think_s = non_negative("think_time_s", think_time_s)
    think = choice("think", think, ("constant", "exponential"))
    min_util = real("minimum_slot_utilization", minimum_slot_utilization)
    if not 0.0 <= min_util <= 1.0:
        raise ValueError(f"minimum_slot_utilization must be in [0, 1], got {minimum_slot_utilization!r}")
    idle_s = non_negative("max_sequence_idle_us", max_sequence_idle_us) * 1e-6
    if strategy == "oldest":
        slots = integer("max_candidate_sequences", max_candidate_sequences, lo=0) or max_batch_size
        rule = BatchRule(max_batch_size, tuple(preferred_batch_sizes or ()), max_queue_delay_us)
        delay_s = 0.0
    else:
        if preferred_batch_sizes:
            raise ValueError("preferred_batch_sizes belongs to the oldest strategy, not direct")
        slots, rule = max_batch_size, None
        delay_s = non_negative("max_queue_delay_us", max_queue_delay_us) * 1e-6
    return _Settings(strategy, max_batch_size, instances, slots, think_s, think, min_util, idle_s, delay_s, rule,
                     service_table(service, max_batch_size).tolist())


class _SequenceRun:
    """One simulation: clients send their sequences' requests, `SequenceSlots` holds them, instances run
    the batches; ``requests`` (in the order sent) and ``batches`` record what happened."""

    def __init__(self, settings: _Settings, starts: list[float], steps: list[int],
                 rng: np.random.Generator) -> None:
        self.settings, self.starts, self.steps, self.rng = settings, starts, steps, rng
        self.slots = SequenceSlots(settings.strategy, settings.instances, settings.slots, settings.idle_s)
        self.requests: list[SequenceRequest] = []
        self.latest: list[SequenceRequest | None] = [None] * len(starts)  # each sequence's latest request
        self.batches: list[tuple[float, float, int, int, int]] = []  # start, end, instance, size, executed
        self.running: list[list[SequenceRequest]] = [[] for _ in range(settings.instances)]
        self.busy = [False] * settings.instances
        self.wake_at = [INF] * settings.instances  # the timer each instance waits for
        self.events: list[tuple[float, int, int, Any]] = []  # heap: (time, order pushed, kind, data)
        self.pushed = itertools.count()  # events at one time pop in the order they were pushed
        self.to_dispatch: set[int] = set()  # instances with new waiting requests or a timer gone off

    def run(self) -> None:
        """Advance the clock to the next arrival or event until every sequence is done."""
        starts, events, n, to_dispatch = self.starts, self.events, len(self.starts), self.to_dispatch
        complete, send, dispatch = self.complete, self.send, self.dispatch  # bound once: the loop is hot
        i = 0
        while i < n or events:
            now = min(starts[i] if i < n else INF, events[0][0] if events else INF)
            while events and events[0][0] <= now:
                _, _, kind, data = heapq.heappop(events)
                if kind == _DONE:
                    complete(data, now)
                elif kind == _SEND:
                    send(data, now)
                elif kind == _WAKE:
                    self.wake_at[data] = INF
                    to_dispatch.add(data)
                elif self.latest[data.seq] is data:  # _IDLE: nothing sent since ``data``
                    self._needs_dispatch(self.slots.reap(data, now))
            while i < n and starts[i] <= now:
                send(i, now)
                i += 1
            if to_dispatch:
                for instance in sorted(to_dispatch):
                    dispatch(instance, now)
                to_dispatch.clear()

    def _push(self, time: float, kind: int, data: Any) -> None:
        """Schedule an event of ``kind`` at ``time``."""
        heapq.heappush(self.events, (time, next(self.pushed), kind, data))

    def _needs_dispatch(self, instance: int | None) -> None:
        """Note that ``instance`` (if any) has a new waiting request."""
        if instance is not None:
            self.to_dispatch.add(instance)

    def send(self, seq: int, now: float) -> None:
        """Sequence ``seq``'s client sends its next request."""
        latest = self.latest[seq]
        step = 0 if latest is None else latest.step + 1
        request = SequenceRequest(seq, step, step == self.steps[seq] - 1, now)
        self.requests.append(request)
        if seq in self.slots.force_ended:  # the server no longer knows this sequence: refused, the client stops
            request.finish, request.rejected = now, True
            return
        self.latest[seq] = request
        if self.settings.idle_s > 0:
            self._push(now + self.settings.idle_s, _IDLE, request)
        self._needs_dispatch(self.slots.arrive(request, now))

    def dispatch(self, instance: int, now: float) -> None:
        """A free ``instance`` with waiting requests runs a batch now, or sets a timer to look again."""
        waiting = self.slots.waiting[instance]
        if self.busy[instance] or not waiting:
            return
        size, when = self._decide(waiting, now)
        if size == 0:
            if when != self.wake_at[instance]:
                self.wake_at[instance] = when
                self._push(when, _WAKE, instance)
            return
        self._start(instance, self.slots.take(instance, now, size), now)

    def _decide(self, waiting: dict[int, SequenceRequest], now: float) -> tuple[int, float]:
        """``(size, now)`` to run a batch now, or ``(0, when)`` to look again at ``when``."""
        s = self.settings
        oldest = next(iter(waiting.values())).queued  # requests are queued in time order
        if s.rule is not None:  # oldest: the dynamic batcher's decision over the candidates' requests
            decision = next_batch([QueuedRequest(request.queued) for request in waiting.values()], now, s.rule)
            return decision.send, decision.wake_at
        # direct (DirectSequenceBatch::BatcherThread): with a delay and a minimum slot utilization, wait
        # until the oldest request waited strictly longer than the delay or enough slots are ready
        if s.delay_s > 0 and s.min_slot_utilization > 0:
            if not (now - oldest > s.delay_s or len(waiting) / s.max_batch_size >= s.min_slot_utilization):
                return 0, math.nextafter(oldest + s.delay_s, INF)
        return len(waiting), now

    def _start(self, instance: int, batch: list[SequenceRequest | None], now: float) -> None:
        """``instance`` starts running ``batch`` (None: a padding slot) until its service time is over."""
        members = [request for request in batch if request is not None]
        end = now + self.settings.batch_time[len(batch)]
        batch_id = len(self.batches)
        self.batches.append((now, end, instance, len(members), len(batch)))
        self.busy[instance] = True
        self.running[instance] = members
        for request in members:
            request.start, request.batch, request.instance = now, batch_id, instance
        self._push(end, _DONE, instance)

    def complete(self, instance: int, now: float) -> None:
        """``instance``'s batch is done: each request's client thinks, then sends its next step."""
        self.busy[instance] = False
        for request in self.running[instance]:
            request.finish = now
            self.slots.finished(request, now)
            if not request.last:
                self._push(now + self._think_time(), _SEND, request.seq)
        self.running[instance] = []
        self.to_dispatch.add(instance)

    def _think_time(self) -> float:
        """The client's pause between a response and its next request."""
        s = self.settings
        if s.think == "constant" or s.think_s == 0.0:
            return s.think_s
        return float(self.rng.exponential(s.think_s))

    def records(self) -> np.ndarray:
        """One row per request, in arrival order."""
        rows = list(map(attrgetter("arrival", "start", "finish", "batch", "instance", "seq", "step", "rejected"),
                        self.requests))
        rec = empty_records(len(rows))
        if rows:
            columns = list(zip(*rows))
            for name, column in zip(("arrival", "start", "finish", "batch_id", "instance", "seq_id", "step",
                                     "rejected"), columns):
                rec[name] = column
        rec = rec[np.argsort(rec["arrival"], kind="stable")]
        rec["id"] = np.arange(rec.size)
        return rec

    def batch_records(self) -> np.ndarray:
        """One row per execution, in start order."""
        bat = make_batches(len(self.batches))
        if self.batches:
            bat["start"], bat["end"], bat["instance"], bat["size"], bat["executed"] = zip(*self.batches)
        return bat
