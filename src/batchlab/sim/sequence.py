"""Triton's sequence batcher: stateful sequences, one request per step, a client think time between steps.

A sequence holds a slot of one instance (the lowest free one, else a FIFO backlog).
``strategy="direct"``: a free instance runs slots 0 … highest ready slot in one batch, empty slots
as padding; the slot frees when the last request joins a batch. ``strategy="oldest"``: a dynamic
batcher over the slots' requests; the slot frees when the last request completes. A sequence idle
``max_sequence_idle_us`` after its last request's arrival is force-ended (its next request rejected).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, non_negative, real, rng_of, times_array
from .engine import INF, EventQueue
from .results import SimResult, empty_records, make_batches
from .rule import BatchRule
from .service import BatchService, check_batch_service, service_times

_REQ, _FREE, _WAKE, _IDLE = 0, 1, 2, 3


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
    s0 = times_array("starts", starts)
    ns = s0.size
    st = int_array("steps", steps, ns, lo=1)
    check_batch_service(service)
    strat = choice("strategy", strategy, ("direct", "oldest"))
    m = integer("max_batch_size", max_batch_size, lo=1)
    k = integer("instances", instances, lo=1)
    think_s = non_negative("think_time_s", think_time_s)
    think_kind = choice("think", think, ("constant", "exponential"))
    msu = real("minimum_slot_utilization", minimum_slot_utilization)
    if not 0.0 <= msu <= 1.0:
        raise ValueError(f"minimum_slot_utilization must be in [0, 1], got {minimum_slot_utilization!r}")
    idle_s = non_negative("max_sequence_idle_us", max_sequence_idle_us) * 1e-6
    if strat == "oldest":
        cands = integer("max_candidate_sequences", max_candidate_sequences, lo=0) or m
        rule = BatchRule(m, tuple(preferred_batch_sizes or ()), max_queue_delay_us)
        delay_s = 0.0
    else:
        if preferred_batch_sizes:
            raise ValueError("preferred_batch_sizes belongs to the oldest strategy, not direct")
        cands = m
        rule = None
        delay_s = non_negative("max_queue_delay_us", max_queue_delay_us) * 1e-6
    rng = rng_of(seed)
    svc = service_times(service, np.arange(m + 1)).tolist()
    if any(not (x > 0) for x in svc[1:]):
        raise ValueError("service times must be > 0 for every batch size up to max_batch_size")

    starts_l = s0.tolist()
    steps_l = st.tolist()
    # per request (grown as clients send)
    r_arr: list[float] = []
    r_seq: list[int] = []
    r_step: list[int] = []
    r_start: list[float] = []
    r_fin: list[float] = []
    r_bid: list[int] = []
    r_inst: list[int] = []
    r_rej: list[bool] = []
    issue: list[float] = []  # when the request reached its slot's batcher (oldest's delay clock)
    # per sequence
    slot_of: list[tuple[int, int] | None] = [None] * ns
    sent = [0] * ns
    last_rid = [-1] * ns
    pend = [-1] * ns        # request waiting in its slot or in the backlog
    inflight = [False] * ns
    aborted = [False] * ns
    reap_after = [False] * ns
    # per instance
    slot_seq = [[-1] * cands for _ in range(k)]
    ready = [[-1] * cands for _ in range(k)]          # direct
    dbq: list[deque[int]] = [deque() for _ in range(k)]  # oldest
    busy = [False] * k
    in_batch: list[list[int]] = [[] for _ in range(k)]
    wake_at = [INF] * k
    free_slots = [(s, i) for i in range(k) for s in range(cands)]
    heapq.heapify(free_slots)
    backlog: deque[int] = deque()
    b_rows: list[tuple[float, float, int, int, int]] = []
    ev = EventQueue()
    dirty: set[int] = set()

    def new_request(j: int, now: float, rejected: bool) -> int:
        rid = len(r_arr)
        r_arr.append(now)
        r_seq.append(j)
        r_step.append(sent[j])
        r_start.append(math.nan)
        r_fin.append(now if rejected else math.nan)
        r_bid.append(-1)
        r_inst.append(-1)
        r_rej.append(rejected)
        issue.append(math.nan)
        sent[j] += 1
        return rid

    def make_ready(j: int, rid: int, now: float) -> None:
        inst, s = slot_of[j]
        issue[rid] = now
        pend[j] = rid
        if strat == "direct":
            ready[inst][s] = rid
        else:
            dbq[inst].append(rid)
        dirty.add(inst)

    def assign(j: int, inst: int, s: int, now: float) -> None:
        slot_of[j] = (inst, s)
        slot_seq[inst][s] = j
        if pend[j] >= 0:
            make_ready(j, pend[j], now)
            if idle_s > 0 and now >= r_arr[pend[j]] + idle_s and r_step[pend[j]] < steps_l[j] - 1:
                # Triton's idle clock starts at the request's arrival and is not reset when a
                # backlogged sequence gets its slot: the reaper force-ends it behind this request.
                aborted[j] = True
                reap_after[j] = True

    def release(j: int, now: float) -> None:
        inst, s = slot_of[j]
        slot_of[j] = None
        slot_seq[inst][s] = -1
        if backlog:
            assign(backlog.popleft(), inst, s, now)
        else:
            heapq.heappush(free_slots, (s, inst))

    def send(j: int, now: float) -> None:
        if aborted[j]:
            new_request(j, now, True)  # the server no longer knows this sequence: refused, client stops
            return
        rid = new_request(j, now, False)
        last_rid[j] = rid
        if idle_s > 0:
            ev.push(now + idle_s, _IDLE, (j, rid))
        if slot_of[j] is None and free_slots and not backlog:
            s, inst = heapq.heappop(free_slots)
            slot_of[j] = (inst, s)
            slot_seq[inst][s] = j
        if slot_of[j] is None:
            pend[j] = rid
            backlog.append(j)
        else:
            make_ready(j, rid, now)

    def start_batch(inst: int, members: list[int], executed: int, now: float) -> None:
        end = now + svc[executed]
        bid = len(b_rows)
        b_rows.append((now, end, inst, len(members), executed))
        busy[inst] = True
        in_batch[inst] = members
        for rid in members:
            r_start[rid] = now
            r_bid[rid] = bid
            r_inst[rid] = inst
            j = r_seq[rid]
            pend[j] = -1
            inflight[j] = True
            if strat == "direct" and r_step[rid] == steps_l[j] - 1:
                release(j, now)  # END taken into a batch frees the slot
        ev.push(end, _FREE, inst)

    def dispatch(inst: int, now: float) -> None:
        if busy[inst]:
            return
        if strat == "direct":
            row = ready[inst]
            rs = [s for s in range(cands) if row[s] >= 0]
            if not rs:
                return
            if delay_s > 0 and msu > 0:
                earliest = min(issue[row[s]] for s in rs)
                if not (now - earliest > delay_s or len(rs) / m >= msu):
                    when = math.nextafter(earliest + delay_s, INF)
                    if when != wake_at[inst]:
                        wake_at[inst] = when
                        ev.push(when, _WAKE, inst)
                    return
            members = [row[s] for s in rs]
            for s in rs:
                row[s] = -1
            start_batch(inst, members, rs[-1] + 1, now)
        else:
            q = dbq[inst]
            if not q:
                return
            bs, when = rule.decide(min(len(q), m), issue[q[0]], now)
            if bs == 0:
                if when != wake_at[inst]:
                    wake_at[inst] = when
                    ev.push(when, _WAKE, inst)
                return
            members = [q.popleft() for _ in range(bs)]
            start_batch(inst, members, bs, now)

    def complete(inst: int, now: float) -> None:
        busy[inst] = False
        for rid in in_batch[inst]:
            r_fin[rid] = now
            j = r_seq[rid]
            inflight[j] = False
            last = r_step[rid] == steps_l[j] - 1
            if strat == "oldest" and last and slot_of[j] is not None:
                release(j, now)
            if reap_after[j] and slot_of[j] is not None and pend[j] < 0:
                release(j, now)
            if not last:
                if think_kind == "constant" or think_s == 0.0:
                    gap = think_s
                else:
                    gap = float(rng.exponential(think_s))
                ev.push(now + gap, _REQ, j)
        in_batch[inst] = []
        dirty.add(inst)

    def idle_check(j: int, rid: int, now: float) -> None:
        if last_rid[j] != rid or slot_of[j] is None or aborted[j]:
            return
        if r_step[rid] == steps_l[j] - 1:
            return  # its END is sent: nothing left to lose
        aborted[j] = True
        if pend[j] >= 0 or inflight[j]:
            reap_after[j] = True
        else:
            release(j, now)

    i = 0
    while i < ns or len(ev):
        ta = starts_l[i] if i < ns else INF
        now = min(ta, ev.peek_time())
        for kind, data in ev.pop_due(now):
            if kind == _FREE:
                complete(data, now)
            elif kind == _REQ:
                send(data, now)
            elif kind == _WAKE:
                wake_at[data] = INF
                dirty.add(data)
            else:
                idle_check(data[0], data[1], now)
        while i < ns and starts_l[i] <= now:
            send(i, now)
            i += 1
        if dirty:
            for inst in sorted(dirty):
                dispatch(inst, now)
            dirty.clear()

    nr = len(r_arr)
    order = np.argsort(np.asarray(r_arr), kind="stable")
    rec = empty_records(nr)
    rec["arrival"] = r_arr
    rec["start"] = r_start
    rec["finish"] = r_fin
    rec["batch_id"] = r_bid
    rec["instance"] = r_inst
    rec["seq_id"] = r_seq
    rec["step"] = r_step
    rec["rejected"] = r_rej
    rec = rec[order]
    rec["id"] = np.arange(nr)
    bat = make_batches(len(b_rows))
    if b_rows:
        cols = list(zip(*b_rows))
        bat["start"], bat["end"], bat["instance"], bat["size"], bat["executed"] = cols
    config = dict(strategy=strat, max_batch_size=m, instances=k, think_time_s=think_s, think=think_kind,
                  slots_per_instance=cands, max_queue_delay_us=float(max_queue_delay_us),
                  minimum_slot_utilization=msu, max_sequence_idle_us=float(max_sequence_idle_us),
                  preferred_batch_sizes=list(rule.effective_preferred) if rule else [], service=repr(service))
    # whole-run counts; each force-ended sequence also shows as one rejected request
    return SimResult(rec, bat, f"sequence_{strat}", config, instances=k, capacity_rps=None, warmup=warmup,
                     extra={"eta": "slots", "summary_extra": {
                         "sequences": ns, "sequences_aborted": int(sum(aborted))}})
