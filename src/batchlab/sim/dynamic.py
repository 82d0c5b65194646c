"""Triton's dynamic batcher, field for field (`simulate_dynamic`): the driver of
`batchlab.batching.dynamic.DynamicBatcher` (the batcher's state, Triton's payloads) and of its
decision `next_batch`.

The driver feeds the batcher its three events in time order: requests arrive (or are rejected by a
full queue), an instance finishes its batch, the batcher's timer fires; every payload an instance
takes becomes a batch. ``events`` runs this driver (`run_events`) whatever the settings: the
reference. ``fast`` (one priority level, no queue-policy limits, one element per request, prefetching)
drives the same batcher with the same decisions, faster: `run_payloads` where the payloads change a
schedule (each event still goes through the batcher's methods; `next_batch`'s answers looked up;
arrivals that cannot wake the batcher queued in bulk), and `run_fast` where they change nothing
(`coincides`): `next_batch` asked once per queue length, its answers looked up. Both give the event
engine's records bit for bit (tests/test_sim_dynamic.py).
"""

from __future__ import annotations

import gc
import heapq
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, non_negative, times_array
from batchlab.batching.dynamic import (INF, TAKEN, BatchRule, Decide, Decision, DynamicBatcher, Payload,
                                      QueuedRequest, RequestQueue, next_batch)
from .results import SimResult, empty_records, make_batches
from .service import BatchService, check_batch_service, service_table


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


def simulate_dynamic(
    arrivals: np.ndarray | Sequence[float],
    service: BatchService,
    max_batch_size: int,
    max_queue_delay_us: float = 0.0,
    preferred_batch_sizes: Sequence[int] = (),
    instances: int = 1,
    max_queue_size: int = 0,
    default_timeout_us: float = 0.0,
    timeout_action: str = "REJECT",
    priorities: Sequence[int] | np.ndarray | None = None,
    priority_levels: int = 0,
    priority_queue_policy: Mapping[int, QueuePolicy] | None = None,
    warmup: float = 0.1,
    engine: str = "auto",
    batch_elements: Sequence[int] | np.ndarray | None = None,
    decide: Decide = next_batch,
) -> SimResult:
    """Simulate Triton's dynamic batcher on sorted ``arrivals`` (seconds).

    ``max_queue_size``, ``default_timeout_us`` and ``timeout_action`` form the default queue policy
    of every priority level; ``priority_queue_policy`` overrides it per level. ``priorities``: each
    request's level (1 = highest). ``warmup``: fraction of requests `SimResult.summary` leaves out.
    ``batch_elements``: each request's batch dimension (default 1); batches are sized and priced in
    elements (``batches["executed"]``; ``batches["size"]`` counts requests). ``decide(pending, now,
    rule, payload) -> Decision``: the decision (default `next_batch`; another one runs on the
    event engine, its answers checked). Without a queue policy and priority levels Triton forms
    payloads while the instances are busy (prefetching); with either, only for an idle instance."""
    a = times_array("arrivals", arrivals)
    check_batch_service(service)
    rule = BatchRule(max_batch_size, tuple(preferred_batch_sizes or ()), max_queue_delay_us)
    k = integer("instances", instances, lo=1)
    default = QueuePolicy(max_queue_size, default_timeout_us, timeout_action)
    levels = integer("priority_levels", priority_levels, lo=0)
    prio = _priorities(priorities, levels, a.size)
    policies = _level_policies(default, max(levels, 1), priority_queue_policy)
    engine = choice("engine", engine, ("auto", "fast", "events"))
    elements = _batch_elements(batch_elements, rule.max_batch_size, a.size)
    if not callable(decide):
        raise ValueError("decide must be a function decide(pending, now, rule, payload) -> Decision")
    simple = len(policies) == 1 and policies[0].is_default and elements is None and decide is next_batch
    if engine == "fast" and not simple:
        raise ValueError("the fast engine handles one priority level, no queue-policy limits, one batch "
                         "element per request and the course's next_batch; use engine='events'")
    svc = service_table(service, rule.max_batch_size)
    fast = engine == "fast" or (engine == "auto" and simple)
    prefetch = levels == 0 and all(policy.is_default for policy in policies)  # support_prefetching_
    if fast and (coincides(rule) or prefetch):  # the fast drivers of the batcher
        rec, bat = (run_fast if coincides(rule) else run_payloads)(a, rule, svc, k)
    else:
        rec, bat = run_events(a, rule, _priced_by_elements(svc), k, prio, policies, elements, decide, prefetch)
    if prio is not None:
        rec["priority"] = prio
    cap = k * rule.overload_batch() / float(svc[rule.overload_batch()])
    if elements is not None:  # requests/s: elements/s over the mean elements per request
        cap /= float(elements.mean())
    return SimResult(rec, bat, "dynamic", _config(rule, k, default, levels, service), instances=k,
                     capacity_rps=cap, warmup=warmup)


def _config(rule: BatchRule, instances: int, default: QueuePolicy, levels: int, service: Any) -> dict[str, Any]:
    """The settings a run reports (`SimResult.config`)."""
    return dict(
        max_batch_size=rule.max_batch_size, preferred_batch_sizes=list(rule.effective_preferred),
        max_queue_delay_us=rule.max_queue_delay_us, instances=instances, max_queue_size=default.max_queue_size,
        default_timeout_us=default.timeout_us, timeout_action=default.timeout_action,
        priority_levels=levels, service=repr(service),
    )


def simulate_rule(arrivals: np.ndarray, service: BatchService, rule: BatchRule, warmup: float = 0.1,
                  **kwargs: Any) -> SimResult:
    """`simulate_dynamic` with the batcher fields and instance count of ``rule``; ``kwargs`` are
    its other arguments (queue policy, priorities, engine)."""
    return simulate_dynamic(arrivals, service, rule.max_batch_size, max_queue_delay_us=rule.max_queue_delay_us,
                            preferred_batch_sizes=rule.preferred, instances=rule.instances, warmup=warmup, **kwargs)


def _priorities(priorities: Any, levels: int, n: int) -> np.ndarray | None:
    """Each request's priority level in [1, levels], or None when priorities are off."""
    if priorities is None:
        return None
    if levels < 1:
        raise ValueError("priorities given but priority_levels is 0; set priority_levels")
    p = int_array("priorities", priorities, n, lo=1)
    if p.size and p.max() > levels:
        raise ValueError(f"priorities must be in [1, {levels}], found {int(p.max())}")
    return p


def _batch_elements(values: Any, max_batch_size: int, n: int) -> np.ndarray | None:
    """Each request's batch dimension, each in [1, max_batch_size]; None when all are 1."""
    if values is None:
        return None
    elements = int_array("batch_elements", values, n, lo=1)
    if elements.size and elements.max() > max_batch_size:
        raise ValueError(f"batch_elements must be <= max_batch_size ({max_batch_size}), found "
                         f"{int(elements.max())}: Triton rejects such a request")
    return elements if np.any(elements != 1) else None


def _priced_by_elements(svc: np.ndarray) -> Callable[[Payload], float]:
    """``batch_time(payload)``: the service time of a batch, from its batch elements."""
    service_time = svc.tolist()
    return lambda payload: service_time[payload.elements]


def _level_policies(default: QueuePolicy, levels: int,
                    overrides: Mapping[int, QueuePolicy] | None) -> list[QueuePolicy]:
    """The queue policy of each priority level: ``default``, replaced where ``overrides`` names the level."""
    policies = [default] * levels
    for level, policy in (overrides or {}).items():
        level = integer("priority_queue_policy level", level, lo=1, hi=levels)
        if not isinstance(policy, QueuePolicy):
            raise ValueError("priority_queue_policy values must be QueuePolicy objects")
        policies[level - 1] = policy
    return policies


def coincides(rule: BatchRule) -> bool:
    """True when Triton's payloads change nothing: with delay 0 and no preferred size (or
    ``max_batch_size`` 1) every arrival joins the payload being filled until it is full, so an
    instance that frees takes what waits, up to ``max_batch_size`` (`run_fast` drives that)."""
    return rule.max_batch_size == 1 or (rule.delay_s == 0 and not rule.preferred)


def run_fast(arrivals: np.ndarray, rule: BatchRule, svc: np.ndarray,
             instances: int) -> tuple[np.ndarray, np.ndarray]:
    """The fast driver where the payloads change nothing (`coincides`; one priority level, no queue
    policy, one element per request): the request and batch records. An instance takes what
    `next_batch` sends for the requests pending then (asked once per queue length)."""
    total, service_time = arrivals.size, svc.tolist()
    arrival = arrivals.tolist() + [INF] * (rule.max_batch_size + 1)  # INF: no more arrivals
    sends = [next_batch([QueuedRequest(0.0)] * n, 0.0, rule).send for n in range(rule.max_batch_size + 1)]
    largest = rule.max_batch_size
    several = instances > 1  # with one instance the heap of idle instances is skipped
    idle = [(0.0, instance) for instance in range(instances)]  # heap: (free since, instance)
    starts: list[float] = []
    sizes: list[int] = []
    used: list[int] = []
    # local names for the calls made once per batch (saves an attribute look-up per call)
    take_idle, make_busy, arrived_by = heapq.heappop, heapq.heappush, bisect_right
    record_start, record_size, record_instance = starts.append, sizes.append, used.append
    head = 0          # the oldest pending request
    clock = 0.0       # the last decision: the next one is never earlier
    free_since, instance = 0.0, 0
    while head < total:
        if several:
            free_since, instance = take_idle(idle)
        now = arrival[head]
        if now < free_since:
            now = free_since
        if now < clock:
            now = clock
        send = sends[arrived_by(arrival, now, head, head + largest) - head]
        record_start(now)
        record_size(send)
        if several:
            record_instance(instance)
            make_busy(idle, (now + service_time[send], instance))
        else:
            free_since = now + service_time[send]
        head += send
        clock = now
    start, size = np.asarray(starts, dtype=np.float64), np.asarray(sizes, dtype=np.int64)
    return _records(arrivals, start, start + svc[size], used or 0, size, size)


def _records(arrivals: np.ndarray, start: Any, end: Any, instance: Any, size: Any, executed: Any,
             ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Request and batch records from each batch's start, end, instance, requests and batch elements;
    ``ids``: the requests of every batch, in batch order (None: all of them, in arrival order)."""
    bat = make_batches(len(start))
    bat["start"], bat["end"], bat["instance"], bat["size"], bat["executed"] = start, end, instance, size, executed
    rec = empty_records(arrivals.size)
    rec["arrival"] = arrivals
    served = slice(None) if ids is None else ids
    for field in ("start", "instance"):
        rec[field][served] = np.repeat(bat[field], bat["size"])
    rec["finish"][served] = np.repeat(bat["end"], bat["size"])
    rec["batch_id"][served] = np.repeat(bat["id"], bat["size"])
    return rec, bat


def run_payloads(arrivals: np.ndarray, rule: BatchRule, svc: np.ndarray,
                 instances: int) -> tuple[np.ndarray, np.ndarray]:
    """The fast driver of the faithful model (one priority level, no queue policy, one element per
    request, `next_batch`): the batcher, its payloads and rate limiter moved event by event by
    `run_events`' driver, with `next_batch`'s answers looked up (`looked_up`), a queue and
    payloads that count their elements by their length, and arrivals that cannot wake the batcher
    queued in bulk. A request is named by its index: request ``i`` is ``QueuedRequest(times[i], 1,
    1, i)``, and the queue, the payloads and the looked-up decision read its arrival from ``times``
    (the batcher's own methods never look inside a request). Returns the request and batch records."""
    times = arrivals.tolist()
    batcher = DynamicBatcher(rule, instances, True, _UnitQueue(), looked_up(rule, times.__getitem__),
                             _unit_payload(times))
    driver = _Driver(batcher, _priced_by_elements(svc), instances, by_index=True)
    collecting = gc.isenabled()
    gc.disable()  # the run makes no reference cycles: the collector would only walk its payloads
    try:
        driver.loop(times + [INF, INF], range(arrivals.size))
    finally:
        if collecting:
            gc.enable()
    return driver.records(arrivals)


def looked_up(rule: BatchRule, arrival: Callable[[Any], float] = attrgetter("arrival")) -> Decide:
    """`next_batch` for requests of one element each queued in arrival order, asked once per
    payload size, pending count (up to ``max_batch_size`` + 1: it reads no further) and whether
    the oldest pending request's delay has expired, its answers looked up. ``arrival(request)``:
    when a queued request arrived (`run_payloads` names requests by their index)."""
    delay, cap = rule.delay_s, rule.max_batch_size + 1
    waited = delay > 0

    def answer(held: int, n: int, now: float) -> tuple[int, bool, bool]:
        send, wake_at, saturated = next_batch([QueuedRequest(0.0)] * n, now, rule, held)
        return send, saturated, wake_at != now  # (the last: it waits for the delay)

    # table[held][n][expired]: the oldest arrived at 0, so now 0 is before its delay and 2 x delay after
    table = [[[answer(held, n, now) for now in (0.0, 2.0 * delay)] for n in range(cap + 1)] for held in range(cap)]

    def decide(pending: Any, now: float, rule: BatchRule, payload: int) -> Decision:
        # (a plain tuple of the Decision's fields: equal to it, and cheaper to make)
        oldest = arrival(pending[0]) + delay if pending else INF
        n = len(pending)
        send, saturated, waits = table[payload][n if n < cap else cap][waited and now >= oldest]
        return send, oldest if waits else now, saturated  # type: ignore[return-value]

    return decide


class _UnitQueue(deque):
    """`RequestQueue` for requests of one batch element each: its elements are its length."""

    elements = property(len)  # (``len`` itself as the getter: no Python call)

    def take(self, count: int) -> list[Any]:
        """Remove the first ``count`` requests, in order."""
        if count == len(self):  # all of them (the common case): copied at once
            taken = list(self)
            self.clear()
            return taken
        popleft = self.popleft
        return [popleft() for _ in range(count)]


def _unit_payload(times: list[float]) -> Callable[[], Payload]:
    """`Payload` for requests of one batch element each, named by their index into ``times``
    (`run_payloads`) and added in arrival order: its elements are its length, its oldest its first."""

    class UnitPayload(Payload):
        __slots__ = ()

        def add(self, *requests: int) -> None:  # type: ignore[override]
            self.extend(requests)
            self.elements = len(self)
            if self:
                self.oldest = times[self[0]]

    return UnitPayload


class PriorityQueue:
    """Triton's queue (core ``scheduler_utils.cc`` ``PriorityQueue``): per priority level, the requests
    that have not timed out (FIFO), then those a DELAY timeout moved behind them. Iterating gives
    them in the order the batcher takes them; ``timed_out`` collects what a REJECT timeout dropped."""

    def __init__(self, policies: list[QueuePolicy]) -> None:
        self.policies = policies
        self.timeouts = [policy.timeout_us * 1e-6 for policy in policies]
        self.waiting: list[deque[QueuedRequest]] = [deque() for _ in policies]
        self.delayed: list[deque[QueuedRequest]] = [deque() for _ in policies]
        self.has_timeouts = any(timeout > 0 for timeout in self.timeouts)
        self.timed_out: list[QueuedRequest] = []
        self.size = 0  # requests queued, all levels
        self.elements = 0  # their batch elements (``queued_batch_size_``)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[QueuedRequest]:
        if len(self.policies) == 1 and not self.delayed[0]:
            return iter(self.waiting[0])
        return chain.from_iterable(chain(*pair) for pair in zip(self.waiting, self.delayed))

    def has_room(self, request: QueuedRequest) -> bool:
        """False (Triton rejects ``request``) when its level holds max_queue_size requests already (the
        caller applied the timeouts first)."""
        level = request.priority - 1
        limit = self.policies[level].max_queue_size
        return not limit or len(self.waiting[level]) + len(self.delayed[level]) < limit

    def append(self, request: QueuedRequest) -> None:
        """Queue ``request`` at its level (after `has_room`)."""
        self.waiting[request.priority - 1].append(request)
        self.size += 1
        self.elements += request.elements

    def expire(self, now: float) -> None:
        """Apply the timeouts to requests that waited longer (``ApplyPolicy``): REJECT drops them,
        DELAY moves them behind their level's other requests (they never time out again)."""
        if not self.has_timeouts:
            return
        for level, timeout in enumerate(self.timeouts):
            waiting = self.waiting[level]
            while timeout > 0 and waiting and waiting[0].arrival + timeout < now:
                request = waiting.popleft()
                if self.policies[level].timeout_action == "DELAY":
                    self.delayed[level].append(request)
                else:
                    self.timed_out.append(request)
                    self.size -= 1
                    self.elements -= request.elements

    def take(self, count: int) -> list[QueuedRequest]:
        """Remove the first ``count`` requests, in order."""
        taken: list[QueuedRequest] = []
        for level in range(len(self.policies)):
            for queue in (self.waiting[level], self.delayed[level]):
                while queue and len(taken) < count:
                    taken.append(queue.popleft())
        self.size -= len(taken)
        self.elements -= sum(request.elements for request in taken)
        return taken


def run_events(
    arrivals: np.ndarray,
    rule: BatchRule,
    batch_time: Callable[[Payload], float],
    instances: int,
    priorities: np.ndarray | None,
    policies: list[QueuePolicy],
    batch_elements: np.ndarray | None = None,
    decide: Decide = next_batch,
    prefetch: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the dynamic batcher on ``arrivals``: each request's priority level (None: all 1) and batch
    elements (None: 1), each level's queue policy; ``batch_time(payload)`` prices a batch from its
    requests (so `batchlab.sim.static_generation` reuses the loop); ``decide`` takes the decisions
    (default `next_batch`; any other is checked); ``prefetch``: Triton's ``support_prefetching_``."""
    total = arrivals.size
    level = priorities.tolist() if priorities is not None else [1] * total
    elements = batch_elements.tolist() if batch_elements is not None else [1] * total
    requests = [QueuedRequest(arrival, elements[i], level[i], i) for i, arrival in enumerate(arrivals.tolist())]
    queue = RequestQueue() if len(policies) == 1 and policies[0].is_default else PriorityQueue(policies)
    checked = decide if decide is next_batch else _checked(decide)
    driver = _Driver(DynamicBatcher(rule, instances, prefetch, queue, checked), batch_time, instances)
    driver.loop(arrivals.tolist() + [INF, INF], requests)
    return driver.records(arrivals)


class _Driver:
    """Feeds the batcher its events in time order and turns each payload an instance takes into a
    batch. At one instant, arrivals come first, then instances finishing, then the batcher's timer.
    ``by_index`` (`run_payloads`): requests are named by their index, one element each, no queue
    policy; arrivals that cannot wake the batcher are then queued in bulk, up to the next event."""

    def __init__(self, batcher: DynamicBatcher, batch_time: Callable[[Payload], float], instances: int,
                 by_index: bool = False) -> None:
        self.batcher, self.queue, self.batch_time, self.by_index = batcher, batcher.queue, batch_time, by_index
        self.policed = isinstance(self.queue, PriorityQueue)
        self.expire = self.queue.expire if self.policed and self.queue.has_timeouts else None
        self.idle = [(0.0, instance) for instance in range(instances)]  # heap: longest idle first
        self.finishes = [(INF, -1)]  # heap: (end, instance) of the batches running, over one that never ends
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.used: list[int] = []
        self.batches: list[Payload] = []  # the payloads the instances took, in order
        self.rejected: list[int] = []  # requests refused by a full queue

    def loop(self, times: list[float], requests: Sequence[Any]) -> None:
        """Every event, in time order, until nothing is left to happen: ``requests[i]`` arrives at
        ``times[i]`` (``times`` ends with two ``INF``)."""
        total, bulk, policed = len(requests), self.by_index, self.policed
        following, finishes, queue, batcher = 0, self.finishes, self.queue, self.batcher
        arrive, run, finish, batch_time = batcher.arrive, batcher.run, batcher.finish, self.batch_time
        expire = self.expire
        pop, push, idle = heapq.heappop, heapq.heappush, self.idle
        start, stop, use, record = self.starts.append, self.ends.append, self.used.append, self.batches.append
        blocked, joining = False, 0
        while True:
            arrival, finish_at = times[following], finishes[0][0]
            wake_at = batcher.wake_at if queue else INF  # the timer matters only while requests wait
            if arrival <= finish_at and arrival <= wake_at:
                if arrival == INF:
                    return
                if bulk:
                    if blocked:  # arrive found no payload slot free, and none frees before the next event
                        joining = total
                    elif batcher.saturated or batcher.payload.state == TAKEN:
                        joining = 0  # arrive's test: the next arrival wakes the batcher (if a slot is free) ...
                    else:  # ... or the one that brings the queue to the next preferred size
                        joining = batcher.next_preferred - len(queue) - 1
                    if joining > 0:  # these arrivals only join the queue: in bulk, up to the next event
                        until = batcher.wake_at if batcher.wake_at < finish_at else finish_at
                        last = bisect_right(times, until, following,
                                            following + joining if joining < total - following else total)
                        if last > following:
                            queue.extend(requests[following:last])
                            following = last
                            continue
                if not policed and times[following + 1] != arrival:  # the common case: one request at a time
                    woken = arrive(requests[following])
                    following += 1
                else:
                    following, woken = self._arrive_together(times, requests, following)
                if not woken:  # (by_index: though arrive's test says it would, no payload slot is free)
                    blocked = bulk and joining <= 0
                    continue
                taken, now = run(arrival), arrival
            elif finish_at <= wake_at:
                push(idle, (finish_at, pop(finishes)[1]))
                if expire:
                    expire(finish_at)
                taken, now = finish(finish_at), finish_at
            else:
                if expire:
                    expire(wake_at)
                taken, now = run(wake_at), wake_at
            blocked = False  # the batcher moved: a slot may have freed
            for payload in taken:  # each payload an instance took becomes a batch
                instance, end = pop(idle)[1], now + batch_time(payload)
                start(now)
                stop(end)
                use(instance)
                record(payload)
                push(finishes, (end, instance))

    def _arrive_together(self, times: list[float], requests: Sequence[Any], following: int) -> tuple[int, bool]:
        """The requests sent at one instant, from ``following`` on, arrive: each is queued (or rejected when
        its level's queue is full); returns the request after them and whether one woke the batcher."""
        now, woken = times[following], False
        if self.expire:
            self.expire(now)
        while times[following] == now:
            request = requests[following]
            if self.policed and not self.queue.has_room(request):
                self.rejected.append(request.id)
            else:
                woken = self.batcher.arrive(request) or woken
            following += 1
        return following, woken

    def records(self, arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The request and batch records; a request a timeout dropped finishes when it timed out,
        one rejected when it arrived."""
        sizes = list(map(len, self.batches))
        members = chain.from_iterable(self.batches)
        ids = np.fromiter(members if self.by_index else map(attrgetter("id"), members), np.int64, sum(sizes))
        rec, bat = _records(arrivals, self.starts, self.ends, self.used, sizes,
                            [payload.elements for payload in self.batches], ids)
        rec["rejected"][self.rejected] = True
        rec["finish"][self.rejected] = arrivals[self.rejected]
        for request in self.queue.timed_out if self.policed else ():
            rec["finish"][request.id] = request.arrival + self.queue.timeouts[request.priority - 1]
            rec["timed_out"][request.id] = True
        return rec, bat


def _checked(decide: Decide) -> Decide:
    """``decide`` with each answer checked: a `Decision` the batcher can carry out, never a stall.
    It is given a list of its own (it may change it)."""

    def checked(pending: Any, now: float, rule: BatchRule, payload: int) -> Decision:
        queued = list(pending)
        answer = decide(queued, now, rule, payload)
        try:
            send, wake_at, *rest = answer
            send, wake_at, saturated = int(send), float(wake_at), bool(rest[0]) if rest else False
        except (TypeError, ValueError):
            raise ValueError(f"decide must return Decision(send, wake_at, saturated), got {answer!r}"[:300]) from None
        if not 0 <= send <= len(queued):
            raise ValueError(f"decide returned send={send} with {len(queued)} request(s) pending")
        if payload + sum(request.elements for request in queued[:send]) > rule.max_batch_size:
            raise ValueError(f"decide returned send={send}: with the payload's {payload} element(s) that is "
                             f"more than max_batch_size {rule.max_batch_size}")
        if send == 0 and not saturated and not wake_at > now:
            raise ValueError(f"decide returned send=0 and wake_at={wake_at!r} <= now={now!r}: the batcher "
                             "would ask again at once, forever")
        return Decision(send, wake_at, saturated)

    return checked
