"""Triton's dynamic batcher, field for field (`simulate_dynamic`); the decision is `batchlab.sim.rule`.

Engines: ``fast`` (one priority level, no queue-policy limits) and ``events`` (queues per level,
rejection, timeouts, priorities); both give the same schedules where both apply.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, times_array
from .engine import INF, EventQueue
from .results import SimResult, empty_records, make_batches
from .rule import BatchRule, QueuePolicy
from .service import BatchService, check_batch_service, service_times

_FREE, _WAKE = 0, 1


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
) -> SimResult:
    """Simulate Triton's dynamic batcher on sorted ``arrivals`` (seconds).

    ``max_queue_size``, ``default_timeout_us`` and ``timeout_action`` form the default queue policy
    of every priority level; ``priority_queue_policy`` overrides it per level. ``priorities``: each
    request's level (1 = highest). ``warmup``: fraction of requests `SimResult.summary` leaves out.
    """
    a = times_array("arrivals", arrivals)
    check_batch_service(service)
    rule = BatchRule(max_batch_size, tuple(preferred_batch_sizes or ()), max_queue_delay_us)
    k = integer("instances", instances, lo=1)
    default = QueuePolicy(max_queue_size, default_timeout_us, timeout_action)
    levels = integer("priority_levels", priority_levels, lo=0)
    prio = _priorities(priorities, levels, a.size)
    nlev = max(levels, 1)
    pols = [default] * nlev
    for lev, pol in (priority_queue_policy or {}).items():
        lev = integer("priority_queue_policy level", lev, lo=1, hi=nlev)
        if not isinstance(pol, QueuePolicy):
            raise ValueError("priority_queue_policy values must be QueuePolicy objects")
        pols[lev - 1] = pol
    engine = choice("engine", engine, ("auto", "fast", "events"))
    simple = nlev == 1 and pols[0].is_default
    if engine == "fast" and not simple:
        raise ValueError("the fast engine handles one priority level and no queue-policy limits; use engine='events'")
    svc = service_times(service, np.arange(rule.max_batch_size + 1))
    if np.any(svc[1:] <= 0) or not np.all(np.isfinite(svc[1:])):
        raise ValueError("service times must be finite and > 0 for every batch size up to max_batch_size")
    if engine == "fast" or (engine == "auto" and simple):
        rec, bat = _run_fast(a, rule, svc, k)
    else:
        svc_list = svc.tolist()
        rec, bat = run_events(a, rule, lambda members: svc_list[len(members)], k, prio, pols)
    if prio is not None:
        rec["priority"] = prio
    cap = k * rule.overload_batch() / float(svc[rule.overload_batch()])
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


def _priorities(priorities, levels: int, n: int) -> np.ndarray | None:
    if priorities is None:
        return None
    if levels < 1:
        raise ValueError("priorities given but priority_levels is 0; set priority_levels")
    p = int_array("priorities", priorities, n, lo=1)
    if p.size and p.max() > levels:
        raise ValueError(f"priorities must be in [1, {levels}], found {int(p.max())}")
    return p


def _run_fast(a: np.ndarray, rule: BatchRule, svc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Loop over batches; pending requests are the contiguous range ``[head, arrived)``."""
    al = a.tolist()
    n = len(al)
    m = rule.max_batch_size
    best = rule.best
    d = rule.delay_s
    minp = rule.min_preferred
    sv = svc.tolist()
    starts: list[float] = []
    sizes: list[int] = []
    insts: list[int] = []
    st_app, sz_app, in_app = starts.append, sizes.append, insts.append
    bis = bisect_right
    head = 0
    if m == 1 and k == 1:
        # one request per batch (the M/D/1 case): start = max(arrival, previous finish)
        s1 = sv[1]
        free = 0.0
        for t in al:
            if t < free:
                t = free
            st_app(t)
            free = t + s1
    elif k == 1 and d == 0.0:
        free = 0.0
        while head < n:
            t = al[head]
            if t < free:
                t = free
            hi = head + m
            if hi > n:
                hi = n
            nc = bis(al, t, head, hi) - head
            b = best[nc]
            if b:
                nc = b
            st_app(t)
            sz_app(nc)
            free = t + sv[nc]
            head += nc
    else:
        heap = [(0.0, i) for i in range(k)]
        pop, push = heapq.heappop, heapq.heappush
        last = 0.0
        while head < n:
            tf, inst = pop(heap)
            t = al[head]
            if t < tf:
                t = tf
            if t < last:
                t = last
            while True:
                hi = head + m
                if hi > n:
                    hi = n
                nc = bis(al, t, head, hi) - head
                b = best[nc]
                if d == 0.0:
                    bs = b if b else nc
                    break
                dl = al[head] + d
                if t >= dl:
                    bs = nc
                    break
                if b:
                    bs = b
                    break
                j = head + minp - 1  # the arrival that makes the smallest preferred size reachable
                t = al[j] if (j < n and al[j] < dl) else dl
            st_app(t)
            sz_app(bs)
            in_app(inst)
            push(heap, (t + sv[bs], inst))
            head += bs
            last = t
    nb = len(starts)
    sz = np.ones(nb, dtype=np.int64) if m == 1 else np.asarray(sizes, dtype=np.int64)
    st = np.asarray(starts, dtype=np.float64)
    en = st + svc[sz]
    bat = make_batches(nb)
    bat["start"] = st
    bat["end"] = en
    bat["size"] = sz
    bat["executed"] = sz
    bat["instance"] = insts if insts else 0
    rec = empty_records(n)
    rec["arrival"] = a
    rec["start"] = np.repeat(st, sz)
    rec["finish"] = np.repeat(en, sz)
    rec["batch_id"] = np.repeat(np.arange(nb), sz)
    rec["instance"] = np.repeat(bat["instance"], sz)
    return rec, bat


def run_events(
    a: np.ndarray,
    rule: BatchRule,
    batch_time: Callable[[list[int]], float],
    k: int,
    prio: np.ndarray | None,
    pols: list[QueuePolicy],
) -> tuple[np.ndarray, np.ndarray]:
    """The general event-driven dynamic batcher; ``batch_time(members)`` prices a batch from its request
    indices (so `batchlab.sim.static_generation` reuses the loop)."""
    al = a.tolist()
    n = len(al)
    pl = prio.tolist() if prio is not None else None
    nlev = len(pols)
    normal = [deque() for _ in range(nlev)]
    delayed = [deque() for _ in range(nlev)]
    tmo = [p.timeout_us * 1e-6 for p in pols]
    qmax = [p.max_queue_size for p in pols]
    act_delay = [p.timeout_action == "DELAY" for p in pols]
    any_timeout = any(t > 0 for t in tmo)
    rec = empty_records(n)
    rec["arrival"] = a
    if pl is not None:
        rec["priority"] = prio
    start = [math.nan] * n
    finish = [math.nan] * n
    bid = [-1] * n
    inst_of = [-1] * n
    rejected: list[int] = []
    timed_out: list[int] = []
    b_start: list[float] = []
    b_end: list[float] = []
    b_size: list[int] = []
    b_inst: list[int] = []
    free = [(0.0, i) for i in range(k)]  # idle instances: longest idle first, then lowest index
    ev = EventQueue()
    pending = 0
    wake_at = INF
    m = rule.max_batch_size

    def purge(now: float) -> None:
        nonlocal pending
        if not any_timeout:
            return
        for lev in range(nlev):
            t = tmo[lev]
            if t <= 0:
                continue
            q = normal[lev]
            while q and al[q[0]] + t < now:  # waited longer than the timeout
                r = q.popleft()
                if act_delay[lev]:
                    delayed[lev].append(r)
                else:
                    timed_out.append(r)
                    finish[r] = al[r] + t
                    pending -= 1

    def candidates(limit: int):
        for lev in range(nlev):
            for q in (normal[lev], delayed[lev]):
                for r in q:
                    if limit == 0:
                        return
                    yield r
                    limit -= 1

    def take(count: int) -> list[int]:
        got: list[int] = []
        for lev in range(nlev):
            for q in (normal[lev], delayed[lev]):
                while q and len(got) < count:
                    got.append(q.popleft())
        return got

    def dispatch(now: float) -> None:
        nonlocal pending, wake_at
        while free and pending:
            purge(now)
            if not pending:
                return
            nc = min(pending, m)
            oldest = min(al[r] for r in candidates(nc)) if (nlev > 1 or any_timeout) else al[_front()]
            bs, when = rule.decide(nc, oldest, now)
            if bs == 0:
                # a timeout never makes a batch due, so waking at arrivals and delay deadlines is enough
                if when < wake_at or wake_at <= now:
                    wake_at = when
                    ev.push(when, _WAKE)
                return
            members = take(bs)
            pending -= bs
            _, inst = heapq.heappop(free)
            end = now + batch_time(members)
            j = len(b_start)
            for r in members:
                start[r] = now
                finish[r] = end
                bid[r] = j
                inst_of[r] = inst
            b_start.append(now)
            b_end.append(end)
            b_size.append(bs)
            b_inst.append(inst)
            ev.push(end, _FREE, inst)

    def _front() -> int:
        return normal[0][0] if normal[0] else delayed[0][0]

    i = 0
    while i < n or len(ev):
        ta = al[i] if i < n else INF
        te = ev.peek_time()
        now = ta if ta < te else te
        for kind, data in ev.pop_due(now):
            if kind == _FREE:
                heapq.heappush(free, (now, data))
        while i < n and al[i] <= now:
            lev = pl[i] - 1 if pl is not None else 0
            if qmax[lev]:
                purge(now)
                if len(normal[lev]) + len(delayed[lev]) >= qmax[lev]:
                    rejected.append(i)
                    finish[i] = al[i]
                    i += 1
                    continue
            normal[lev].append(i)
            pending += 1
            i += 1
        dispatch(now)

    rec["start"] = start
    rec["finish"] = finish
    rec["batch_id"] = bid
    rec["instance"] = inst_of
    if rejected:
        rec["rejected"][rejected] = True
    if timed_out:
        rec["timed_out"][timed_out] = True
    nb = len(b_start)
    bat = make_batches(nb)
    bat["start"] = b_start
    bat["end"] = b_end
    bat["size"] = b_size
    bat["executed"] = b_size
    bat["instance"] = b_inst
    return rec, bat
