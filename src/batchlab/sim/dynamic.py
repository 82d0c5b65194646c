"""Triton's dynamic batcher, field for field (`simulate_dynamic`): drivers around `batchlab.sim.rule.next_batch`.

Two drivers give the same schedules where both apply. ``events`` (queues per priority level,
rejection, timeouts, requests of several batch elements) asks `next_batch` at every decision.
``fast`` (one priority level, no queue-policy limits, one element per request) asks it once per
queue length before the run and looks the answers up.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from itertools import chain
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, times_array
from .engine import INF, EventQueue
from .results import SimResult, empty_records, make_batches
from .rule import BatchRule, Decision, QueuedRequest, QueuePolicy, next_batch
from .service import BatchService, check_batch_service, service_times

_FREE, _WAKE = 0, 1

#: A batcher decision: ``decide(pending, now, rule) -> Decision`` (`next_batch` or a stand-in for it).
Decide = Callable[[Sequence[QueuedRequest], float, BatchRule], Decision]


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
    rule) -> Decision``: the decision (default `next_batch`; another one runs on the event engine).
    """
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
        raise ValueError("decide must be a function decide(pending, now, rule) -> Decision")
    simple = len(policies) == 1 and policies[0].is_default and elements is None and decide is next_batch
    if engine == "fast" and not simple:
        raise ValueError("the fast engine handles one priority level, no queue-policy limits, one batch "
                         "element per request and the course's next_batch; use engine='events'")
    svc = _service_table(service, rule.max_batch_size)
    if engine == "fast" or (engine == "auto" and simple):
        rec, bat = _fast_records(a, svc, *run_fast(a, rule, svc.tolist(), k))
    else:
        rec, bat = run_events(a, rule, _priced_by_elements(svc, elements), k, prio, policies, elements, decide)
    if prio is not None:
        rec["priority"] = prio
    cap = k * rule.overload_batch() / float(svc[rule.overload_batch()])
    if elements is not None:  # requests/s: elements/s over the mean elements per request
        cap /= float(elements.mean())
    config = dict(
        max_batch_size=rule.max_batch_size, preferred_batch_sizes=list(rule.effective_preferred),
        max_queue_delay_us=rule.max_queue_delay_us, instances=k, max_queue_size=default.max_queue_size,
        default_timeout_us=default.timeout_us, timeout_action=default.timeout_action,
        priority_levels=levels, service=repr(service),
    )
    return SimResult(rec, bat, "dynamic", config, instances=k, capacity_rps=cap, warmup=warmup)


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


def _service_table(service: BatchService, max_batch_size: int) -> np.ndarray:
    """t(B) for B = 0 .. max_batch_size (index = batch elements), each finite and > 0 from B = 1."""
    svc = service_times(service, np.arange(max_batch_size + 1))
    if np.any(svc[1:] <= 0) or not np.all(np.isfinite(svc[1:])):
        raise ValueError("service times must be finite and > 0 for every batch size up to max_batch_size")
    return svc


def _batch_elements(values: Any, max_batch_size: int, n: int) -> np.ndarray | None:
    """Each request's batch dimension, each in [1, max_batch_size]; None when all are 1."""
    if values is None:
        return None
    elements = int_array("batch_elements", values, n, lo=1)
    if elements.size and elements.max() > max_batch_size:
        raise ValueError(f"batch_elements must be <= max_batch_size ({max_batch_size}), found "
                         f"{int(elements.max())}: Triton rejects such a request")
    return elements if np.any(elements != 1) else None


def _priced_by_elements(svc: np.ndarray, elements: np.ndarray | None) -> Callable[[list[int]], float]:
    """``batch_time(ids)``: the service time of a batch of these requests, from its batch elements."""
    service_time = svc.tolist()
    if elements is None:
        return lambda members: service_time[len(members)]
    per_request = elements.tolist()
    return lambda members: service_time[sum(per_request[r] for r in members)]


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


def sends_by_queue_length(rule: BatchRule) -> tuple[list[int], list[int]]:
    """What `next_batch` sends for ``n`` pending one-element requests (index ``n``, up to
    ``max_batch_size``; 0 = wait): while the oldest is within ``max_queue_delay``, and once it is not."""
    within_delay, after_delay = [0], [0]
    for n in range(1, rule.max_batch_size + 1):
        queue = [QueuedRequest(arrival=0.0)] * n
        within_delay.append(next_batch(queue, 0.0, rule).send)
        after_delay.append(next_batch(queue, rule.delay_s, rule).send)
    return within_delay, after_delay


def run_fast(arrivals: np.ndarray, rule: BatchRule, service_time: list[float],
             instances: int) -> tuple[list[float], list[int], list[int]]:
    """The fast driver: one priority level, no queue policy, one element per request. Returns each
    batch's start, size and instance (the instances list is empty with one instance).

    The pending requests are then the arrivals from ``head`` up to the clock, in order, and
    `next_batch`'s answer depends only on how many are pending (up to ``max_batch_size``) and on
    whether the oldest has waited the delay: `sends_by_queue_length` asks it once per case.
    """
    total = arrivals.size
    arrival = arrivals.tolist() + [INF] * rule.max_batch_size  # INF: no more arrivals
    within_delay, after_delay = sends_by_queue_length(rule)
    delay, largest = rule.delay_s, rule.max_batch_size
    several = instances > 1  # with one instance the heap of idle instances is skipped (1/4 of the time)
    idle = [(0.0, instance) for instance in range(instances)]  # heap: (free since, instance)
    starts: list[float] = []
    sizes: list[int] = []
    used: list[int] = []
    # local names for the calls made once per batch (looking them up each time costs ~10 %)
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
        while True:
            pending = arrived_by(arrival, now, head, head + largest) - head
            # past the oldest's deadline: the same test next_batch makes (a delay of 0 never expires)
            send = after_delay[pending] if delay and now >= arrival[head] + delay else within_delay[pending]
            if send:
                break
            # nothing goes yet: look again at the next arrival or at the oldest's deadline
            deadline = arrival[head] + delay
            now = arrival[head + pending] if arrival[head + pending] < deadline else deadline
        record_start(now)
        record_size(send)
        if several:
            record_instance(instance)
            make_busy(idle, (now + service_time[send], instance))
        else:
            free_since = now + service_time[send]
        head += send
        clock = now
    return starts, sizes, used


def _fast_records(arrivals: np.ndarray, svc: np.ndarray, starts: list[float], sizes: list[int],
                  used: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Request and batch records of a FIFO run from each batch's start, size and instance."""
    size = np.asarray(sizes, dtype=np.int64)
    start = np.asarray(starts, dtype=np.float64)
    end = start + svc[size]
    bat = make_batches(size.size)
    bat["start"] = start
    bat["end"] = end
    bat["size"] = size
    bat["executed"] = size
    bat["instance"] = used if used else 0
    rec = empty_records(arrivals.size)
    rec["arrival"] = arrivals
    rec["start"] = np.repeat(start, size)
    rec["finish"] = np.repeat(end, size)
    rec["batch_id"] = np.repeat(np.arange(size.size), size)
    rec["instance"] = np.repeat(bat["instance"], size)
    return rec, bat


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

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[QueuedRequest]:
        if len(self.policies) == 1 and not self.delayed[0]:
            return iter(self.waiting[0])
        return chain.from_iterable(chain(*pair) for pair in zip(self.waiting, self.delayed))

    def admit(self, request: QueuedRequest, now: float) -> bool:
        """Queue ``request`` at its level; False (rejected) when that level holds max_queue_size already."""
        level = request.priority - 1
        limit = self.policies[level].max_queue_size
        if limit:
            self.expire(now)
            if len(self.waiting[level]) + len(self.delayed[level]) >= limit:
                return False
        self.waiting[level].append(request)
        self.size += 1
        return True

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

    def take(self, count: int) -> list[QueuedRequest]:
        """Remove the first ``count`` requests, in order."""
        taken: list[QueuedRequest] = []
        for level in range(len(self.policies)):
            for queue in (self.waiting[level], self.delayed[level]):
                while queue and len(taken) < count:
                    taken.append(queue.popleft())
        self.size -= len(taken)
        return taken


class _Log:
    """What happened to each request (by id) and each batch, filled in as the run goes."""

    def __init__(self, total: int) -> None:
        self.start = [np.nan] * total
        self.finish = [np.nan] * total
        self.batch_id = [-1] * total
        self.instance = [-1] * total
        self.rejected: list[int] = []
        self.batches: list[tuple[float, float, int, int, int]] = []  # start, end, size, elements, instance

    def batch(self, members: list[QueuedRequest], start: float, end: float, instance: int) -> None:
        """Record one batch and its members."""
        for request in members:
            self.start[request.id] = start
            self.finish[request.id] = end
            self.batch_id[request.id] = len(self.batches)
            self.instance[request.id] = instance
        self.batches.append((start, end, len(members), sum(request.elements for request in members), instance))

    def records(self, arrivals: np.ndarray, queue: PriorityQueue) -> tuple[np.ndarray, np.ndarray]:
        """The request and batch records; a request a timeout dropped finishes when it timed out."""
        for request in queue.timed_out:
            self.finish[request.id] = request.arrival + queue.timeouts[request.priority - 1]
        rec = empty_records(arrivals.size)
        rec["arrival"] = arrivals
        rec["start"] = self.start
        rec["finish"] = self.finish
        rec["batch_id"] = self.batch_id
        rec["instance"] = self.instance
        rec["rejected"][self.rejected] = True
        rec["timed_out"][[request.id for request in queue.timed_out]] = True
        bat = make_batches(len(self.batches))
        if self.batches:
            bat["start"], bat["end"], bat["size"], bat["executed"], bat["instance"] = zip(*self.batches)
        return rec, bat


def run_events(
    arrivals: np.ndarray,
    rule: BatchRule,
    batch_time: Callable[[list[int]], float],
    instances: int,
    priorities: np.ndarray | None,
    policies: list[QueuePolicy],
    batch_elements: np.ndarray | None = None,
    decide: Decide = next_batch,
) -> tuple[np.ndarray, np.ndarray]:
    """The general event-driven dynamic batcher: each request's priority level (None: all 1) and
    batch elements (None: 1), each level's queue policy; ``batch_time(ids)`` prices a batch from its
    request indices (so `batchlab.sim.static_generation` reuses the loop); ``decide`` takes the
    decisions (default `next_batch`)."""
    total = arrivals.size
    level = priorities.tolist() if priorities is not None else [1] * total
    elements = batch_elements.tolist() if batch_elements is not None else [1] * total
    requests = [QueuedRequest(arrival, elements[i], level[i], i) for i, arrival in enumerate(arrivals.tolist())]
    driver = _EventDriver(rule, batch_time, instances, PriorityQueue(policies), _Log(total), decide)
    following = 0  # the next request to arrive
    while True:
        now = min(requests[following].arrival if following < total else INF, driver.events.peek_time())
        if now == INF:  # no arrival and no event left
            break
        driver.free_instances(now)
        while following < total and requests[following].arrival <= now:
            driver.arrive(requests[following], now)
            following += 1
        driver.dispatch(now)
    rec, bat = driver.log.records(arrivals, driver.queue)
    if priorities is not None:
        rec["priority"] = priorities
    return rec, bat


class _EventDriver:
    """The state of an event-driven run: the queue, idle instances, pending events and the log."""

    def __init__(self, rule: BatchRule, batch_time: Callable[[list[int]], float], instances: int,
                 queue: PriorityQueue, log: _Log, decide: Decide = next_batch) -> None:
        self.rule = rule
        self.decide = decide
        self.batch_time = batch_time
        self.queue = queue
        self.log = log
        self.idle = [(0.0, instance) for instance in range(instances)]  # heap: longest idle first
        self.events = EventQueue()
        self.wake_at = INF  # the wake-up already scheduled

    def free_instances(self, now: float) -> None:
        """Handle the events due at ``now``: an instance that finished its batch becomes idle."""
        for kind, instance in self.events.pop_due(now):
            if kind == _FREE:
                heapq.heappush(self.idle, (now, instance))

    def arrive(self, request: QueuedRequest, now: float) -> None:
        """Queue an arriving request, or reject it when its level's queue is full."""
        if not self.queue.admit(request, now):
            self.log.rejected.append(request.id)
            self.log.finish[request.id] = request.arrival

    def dispatch(self, now: float) -> None:
        """While an instance is idle, ask `next_batch` (``decide``) and send the batch, or schedule a wake-up."""
        while self.idle and self.queue.size:
            self.queue.expire(now)
            if not self.queue.size:
                return
            if self.decide is next_batch:
                decision = next_batch(self.queue, now, self.rule)
            else:  # another decision sees a list of its own and may answer wrongly: say how
                decision = _checked(self.decide(list(self.queue), now, self.rule), now, self.queue.size)
            if decision.send == 0:
                # a timeout never makes a batch due, so waking at arrivals and deadlines is enough
                if decision.wake_at < self.wake_at or self.wake_at <= now:
                    self.wake_at = decision.wake_at
                    self.events.push(decision.wake_at, _WAKE)
                return
            members = self.queue.take(decision.send)
            _, instance = heapq.heappop(self.idle)
            end = now + self.batch_time([request.id for request in members])
            self.log.batch(members, now, end, instance)
            self.events.push(end, _FREE, instance)


def _checked(decision: Any, now: float, pending: int) -> Decision:
    """``decision`` as a `Decision`; ValueError when it cannot be carried out (or would stall the run)."""
    try:
        send, wake_at = decision
        send, wake_at = int(send), float(wake_at)
    except (TypeError, ValueError):
        raise ValueError(f"decide must return Decision(send, wake_at), got {decision!r}"[:300]) from None
    if not 0 <= send <= pending:
        raise ValueError(f"decide returned send={send} with {pending} request(s) pending")
    if send == 0 and not wake_at > now:
        raise ValueError(f"decide returned send=0 and wake_at={wake_at!r} <= now={now!r}: the batcher "
                         "would ask again at once, forever")
    return Decision(send, wake_at)
