"""Triton's dynamic batcher as Triton 2.51 runs it (core branch r24.10): the decision `next_batch`
(``GetDynamicBatch``) and the state it works in, `DynamicBatcher`: the queue, the payload being
filled, the rate limiter's queue of payloads and the batcher thread's wake-up rule.

While every instance is busy Triton does not wait for one to free before it forms the next batch:
it fills a *payload*, hands it to the rate limiter, and keeps adding requests to it until an
instance takes it or it is saturated. So the decision counts what the payload already holds.

Comments cite core r24.10 by line: ``src/dynamic_batch_scheduler.cc`` when no file is named,
``rate_limiter.cc``, ``instance_queue.cc``, ``scheduler_utils.cc``. The cursor Triton keeps over
the queue between calls is reset at every call here, as it is in Triton for requests without a
timeout (``IsCursorValid``, scheduler_utils.cc:473: valid only before the pending batch's closest
timeout, which is 0 when none is set), so each call reads the queue from its front.

`BatchRule` holds the settings. Nothing here imports protobuf or tritonclient; `batchlab.sim`
drives the batcher (arrivals, instances finishing, timer wake-ups).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from math import inf as INF
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from batchlab._validate import integer, non_negative

IDLE_WAIT_S = 0.5  # default_wait_microseconds (:329): how long the batcher sleeps on an empty queue
FORMING, WAITING, TAKEN = "forming", "waiting", "taken"  # a payload's state (payload.h State)


class QueuedRequest(NamedTuple):
    """A request waiting in the dynamic batcher's queue."""

    arrival: float     # when it entered the queue (s)
    elements: int = 1  # its batch dimension: the batch elements it adds to a batch
    priority: int = 1  # its priority level (1 = highest)
    id: int = 0        # which request it is (its index in the run)


class Decision(NamedTuple):
    """What `next_batch` decides: the first ``send`` queued requests join the payload now; or, when
    ``send`` is 0, look again at ``wake_at`` (or when woken earlier). ``saturated``: the payload
    takes no more requests, the next ones start a new payload (``payload_saturated_``)."""

    send: int
    wake_at: float
    saturated: bool = False


@dataclass(frozen=True, order=True)
class BatchRule:
    """One dynamic-batcher setting: ``max_batch_size``, ``preferred`` (sorted, possibly empty),
    ``max_queue_delay_us`` and ``instances`` (``instance_group.count``). ``effective_preferred`` is
    what Triton uses (empty means ``[max_batch_size]``); `next_batch` takes the decisions.
    """

    max_batch_size: int
    preferred: tuple[int, ...] = ()
    max_queue_delay_us: float = 0.0
    instances: int = 1
    effective_preferred: tuple[int, ...] = field(init=False, repr=False, compare=False)
    max_preferred: int = field(init=False, repr=False, compare=False)
    delay_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = integer("max_batch_size", self.max_batch_size, lo=1)
        pref = _preferred_sizes(self.preferred, m)
        d = non_negative("max_queue_delay_us", self.max_queue_delay_us)
        k = integer("instances", self.instances, lo=1)
        eff = pref or (m,)
        for name, value in (("max_batch_size", m), ("max_queue_delay_us", d), ("preferred", pref),
                            ("instances", k), ("effective_preferred", eff), ("max_preferred", eff[-1]),
                            ("delay_s", d * 1e-6)):
            object.__setattr__(self, name, value)

    def overload_batch(self) -> int:
        """The batch size sent when the queue is long: max preferred with delay 0, else max_batch_size."""
        return self.max_preferred if self.delay_s == 0.0 else self.max_batch_size

    def full_batch_capacity(self, service: Any) -> float:
        """Requests/s the instances serve when the queue is long (batches of the size then sent)."""
        b = self.overload_batch()
        return self.instances * b / float(service.time(b))

    @property
    def label(self) -> str:
        """Short text such as ``B=16 d=2000us pref=[8,16] x2``."""
        s = f"B={self.max_batch_size} d={self.max_queue_delay_us:g}us"
        if self.preferred:
            s += " pref=[" + ",".join(map(str, self.preferred)) + "]"
        if self.instances > 1:
            s += f" x{self.instances}"
        return s

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict."""
        return {"max_batch_size": self.max_batch_size, "max_queue_delay_us": self.max_queue_delay_us,
                "preferred": list(self.preferred), "instances": self.instances}

    def config_changes(self, name: str | None = None) -> dict[str, Any]:
        """The config.pbtxt fields this setting writes, as `batchlab.config_pbtxt.edit_config` takes them."""
        changes: dict[str, Any] = {} if name is None else {"name": name}
        changes["max_batch_size"] = self.max_batch_size
        changes["dynamic_batching.max_queue_delay_microseconds"] = int(round(self.max_queue_delay_us))
        changes["dynamic_batching.preferred_batch_size"] = list(self.preferred)
        changes["instance_group.0.count"] = self.instances
        return changes

    def apply(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a model configuration in JSON form (the server's ``get_model_config``) with
        this config's batcher fields, for a ``load_model(config=...)`` override."""
        cfg = json.loads(json.dumps(dict(config)))
        cfg["max_batch_size"] = int(self.max_batch_size)
        db = dict(cfg.get("dynamic_batching") or {})
        db.pop("preferred_batch_size", None)
        db.pop("max_queue_delay_microseconds", None)
        if self.preferred:
            db["preferred_batch_size"] = [int(p) for p in self.preferred]
        if self.max_queue_delay_us:
            db["max_queue_delay_microseconds"] = int(round(self.max_queue_delay_us))
        cfg["dynamic_batching"] = db
        return cfg


def _preferred_sizes(preferred: Sequence[int], max_batch_size: int) -> tuple[int, ...]:
    """Sorted unique preferred sizes, each in ``[1, max_batch_size]`` (may be empty)."""
    sizes = sorted({integer("preferred_batch_sizes entry", p, lo=1) for p in preferred})
    if sizes and sizes[-1] > max_batch_size:
        raise ValueError(
            f"preferred_batch_sizes entry {sizes[-1]} exceeds max_batch_size {max_batch_size}"
        )
    return tuple(sizes)


# ------------------------------------------------------------------------------ the mechanism

def next_batch(pending: Iterable[QueuedRequest], now: float, rule: BatchRule,
               payload: int = 0) -> Decision:
    """Triton's batch decision (``GetDynamicBatch``, :488): how many requests from the front of
    ``pending`` join the payload, which already holds ``payload`` batch elements (0: a new one)."""
    elements = payload  # batch elements in the payload and the pending requests
    count = 0           # pending requests: the first ``count`` of the queue (PendingBatchCount)
    best = 0            # requests of the best batch (best_preferred_batch_size; 0: none yet)
    saturated = full = False  # payload_saturated_ (it takes no more), send_now (next won't fit)
    oldest = INF        # the earliest arrival among them: the delay runs from it
    for request in pending:
        grown = elements + request.elements
        if elements and grown > rule.max_preferred and not best:
            best, saturated = count, True  # :540 it passes the largest preferred size: mark here
        if elements and grown > rule.max_batch_size:
            full = True                    # :547 it does not fit: nor do the requests behind it
            break
        elements, count = grown, count + 1
        oldest = min(oldest, request.arrival)
        if elements in rule.effective_preferred:
            best = count                   # :578 a preferred size (payload included)
    # :591 the delay has expired (a delay of 0 never counts as expired)
    expired = rule.delay_s > 0 and now >= oldest + rule.delay_s
    if best and not expired:  # :596 the best batch goes now; with delay 0 the payload closes
        return Decision(best, now, saturated or rule.delay_s == 0)
    if full or elements >= rule.max_preferred:
        return Decision(count, now, True)  # :613 it cannot grow: all pending go, payload closes
    if expired or rule.delay_s == 0:
        return Decision(count, now)        # :619 nothing to wait for: what is pending goes
    return Decision(0, oldest + rule.delay_s)  # :647 wait for the oldest request's delay


class Payload(list):
    """One batch being filled (core ``Payload``): its requests, and where it is."""
    __slots__ = ("elements", "oldest", "state")  # BatchSize(), BatcherStartNs(); FORMING, WAITING, TAKEN
    def __init__(self) -> None:
        self.elements, self.oldest, self.state = 0, INF, FORMING

    def add(self, *requests: QueuedRequest) -> None:
        for request in requests:
            self.append(request)
            self.elements += request.elements
            self.oldest = min(self.oldest, request.arrival)


class RequestQueue(deque):
    """The batcher's queue with one priority level: requests in arrival order, and their batch
    elements (``queued_batch_size_``)."""

    elements = 0

    def append(self, request: QueuedRequest) -> None:
        super().append(request)
        self.elements += request.elements

    def take(self, count: int) -> list[QueuedRequest]:
        """Remove the first ``count`` requests, in order."""
        taken = [self.popleft() for _ in range(count)]
        self.elements -= sum(request.elements for request in taken)
        return taken


#: A batch decision: ``decide(pending, now, rule, payload) -> Decision`` (`next_batch` or a stand-in).
Decide = Callable[[Any, float, BatchRule, int], Decision]


class RateLimiter:
    """The rate limiter (``rate_limiter.cc``): payloads handed over, and the instances that take them."""
    def __init__(self, rule: BatchRule, instances: int = 1, prefetch: bool = True) -> None:
        self.rule, self.waiting = rule, deque()  # the payloads no instance took yet
        self.idle = instances  # instances waiting for a payload (DequeuePayload)
        self.slots = 2 * instances if prefetch else 0  # :228 with prefetching, up to 2 x instances wait

    def slot_free(self) -> bool:
        """``PayloadSlotAvailable`` (:208): may the batcher form a payload now?"""
        return len(self.waiting) < self.slots if self.slots else self.idle > len(self.waiting)

    def take(self, now: float) -> list[Payload]:
        """Idle instances take the waiting payloads, oldest first (``DequeuePayload``, :298)."""
        taken = []
        while self.idle and self.waiting:
            payload, self.idle = self.waiting.popleft(), self.idle - 1
            payload.state = TAKEN                           # instance_queue.cc:67
            # instance_queue.cc:71-99 with a delay, payloads behind whose oldest waited longer join
            # while they fit; the first that does not is marked taken (it grows no more) but stays
            while self.waiting and 0 < self.rule.delay_s < now - self.waiting[0].oldest:
                self.waiting[0].state = TAKEN
                if payload.elements + self.waiting[0].elements > self.rule.max_batch_size:
                    break
                payload.add(*self.waiting.popleft())
            taken.append(payload)
        return taken


class DynamicBatcher:
    """The dynamic batcher (``DynamicBatchScheduler``): its queue and the payload it fills. Driven by
    `arrive` (then `run` if woken), `finish`, `run` at ``wake_at``; these return what instances took."""
    def __init__(self, rule: BatchRule, instances: int = 1, prefetch: bool = True, queue: Any = None,
                 decide: Decide = next_batch, payload: Callable[[], Payload] = Payload) -> None:
        self.rule, self.decide, self.new_payload = rule, decide, payload  # new_payload(): an empty payload
        self.queue = RequestQueue() if queue is None else queue  # queue_, its .elements
        # curr_payload_, payload_saturated_, next_preferred_batch_size_ (the queued size that wakes it)
        self.payload, self.saturated, self.next_preferred = self.new_payload(), False, 0
        self.limiter, self.wake_at = RateLimiter(rule, instances, prefetch), INF  # it sleeps until wake_at unless woken

    def arrive(self, request: QueuedRequest) -> bool:
        """A request is queued (``Enqueue``, :185); True if it wakes the batcher (:269-280)."""
        self.queue.append(request)
        return self.limiter.slot_free() and (self.saturated or self.payload.state == TAKEN
                                             or self.queue.elements >= self.next_preferred)

    def finish(self, now: float) -> list[Payload]:
        """An instance finished: its batch's callback wakes the batcher, who looks first (payload.cc:216)."""
        self.limiter.idle += 1
        return self.run(now)

    def run(self, now: float) -> list[Payload]:
        """The batcher works until it sleeps; instances take payloads, which wakes it (rate_limiter.cc:355)."""
        taken: list[Payload] = []
        while True:
            self.wake_at = self.work(now)
            took = self.limiter.take(now)
            if not took:
                return taken
            taken += took

    def work(self, now: float) -> float:
        """``BatcherThread`` (:302): fill payloads until it must sleep; returns until when."""
        while True:
            if self.saturated or self.payload.state == TAKEN:  # :344 start a new payload
                self.payload, self.saturated, self.next_preferred = self.new_payload(), False, 0
            if not self.queue:
                return now + IDLE_WAIT_S                      # :360 nothing queued
            if not self.limiter.slot_free():
                return INF                                    # :367 until an instance takes one
            held = self.payload.elements
            send, wake_at, self.saturated = self.decide(self.queue, now, self.rule, held)  # :379
            if send == 0 and not self.saturated:              # it would wait
                total = held + self.queue.elements            # :624 wake at the next preferred size
                sizes = self.rule.effective_preferred         # (upper_bound; past the largest: :630 the smallest)
                self.next_preferred = (sizes + sizes[:1])[bisect_right(sizes, total)] - held
                if not held or held in self.rule.effective_preferred:
                    return wake_at
                send = len(self.queue)  # :641 a payload not at a preferred size takes them all
            self.payload.add(*self.queue.take(send))          # :388-417 into the payload
            if self.payload.state == FORMING and self.payload:  # :430 hand it to the rate limiter
                self.payload.state = WAITING
                self.limiter.waiting.append(self.payload)
