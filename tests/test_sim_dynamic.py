"""Triton's dynamic batcher in batchlab: the decision `next_batch`, the batcher's state
(`DynamicBatcher`: payloads, the rate limiter's queue, the wake-up rule), the simulator's engines,
queue policy and priorities.

Expected schedules are worked out by hand from core r24.10 (``dynamic_batch_scheduler.cc``,
``rate_limiter.cc``, ``instance_queue.cc``; see batchlab.batching.dynamic). Each test would fail on a
batcher that, e.g., sends the largest pending batch with an idle-only rule, lets a waiting payload
stop at a preferred size, forgets the payload in the size tests, wakes on every arrival, never merges
waiting payloads, bounds queue time by max_queue_delay, or ignores the queue policy.
"""

from collections import deque

import numpy as np
import pytest

from batchlab.batching.dynamic import TAKEN, WAITING, DynamicBatcher, Payload
from batchlab.sim import workload as wl
from batchlab.sim.dynamic import coincides, looked_up, simulate_dynamic
from batchlab.sim import BatchRule, Decision, QueuedRequest, QueuePolicy, next_batch
from batchlab.sim.service import Affine, Table

INF = float("inf")
MS = 1e-3
BOTH = ["fast", "events"]


def batches(res):
    return [(round(float(s), 9), int(z)) for s, z in zip(res.batches["start"], res.batches["size"])]


def queue(*elements, arrival=0.0):
    """Requests of the given batch elements, all arriving at ``arrival``."""
    return [QueuedRequest(arrival, e) for e in elements]


# ------------------------------------------------------------------ the decision, a new payload

def test_next_batch_on_a_new_payload():
    r = BatchRule(8, (4, 8), 0)
    assert next_batch(queue(*[1] * 7), 0.0, r) == Decision(4, 0.0, True)  # 7 pending: 4 go; delay 0 closes it
    assert next_batch(queue(*[1] * 3), 0.0, r) == Decision(3, 0.0)  # none reachable, delay 0: all go, no wait
    assert next_batch(queue(*[1] * 11), 0.0, r) == Decision(8, 0.0, True)  # at most max_batch_size
    r = BatchRule(8, (), 1000)
    assert r.preferred == () and r.effective_preferred == (8,)  # empty preferred means [max_batch_size]
    assert next_batch(queue(*[1] * 3), 0.0005, r) == Decision(0, pytest.approx(0.001))  # wait for the oldest
    assert next_batch(queue(*[1] * 3), 0.001, r) == Decision(3, 0.001)  # waited the delay: what is pending
    assert next_batch(queue(*[1] * 8), 0.0, r).send == 8
    with pytest.raises(ValueError, match="exceeds max_batch_size"):
        BatchRule(4, (8,), 0)


def test_next_batch_preferred_size_goes_before_the_deadline_else_waits():
    rule = BatchRule(8, (2,), 1000)
    pending = [QueuedRequest(0.0), QueuedRequest(0.0001), QueuedRequest(0.0002)]
    assert next_batch(pending, 0.0003, rule) == Decision(2, 0.0003)  # 3 pending, preferred 2 reachable
    assert next_batch(pending[:1], 0.0005, rule) == Decision(0, 0.001)  # 1 pending: wait for 0 + 1 ms
    # the deadline runs from the earliest arrival in the batch, not from the first in the queue
    # (a later arrival of a higher priority level stands in front)
    assert next_batch([QueuedRequest(0.0005), QueuedRequest(0.0001)], 0.0006, BatchRule(8, (), 1000)) \
        == Decision(0, 0.0011)


def test_next_batch_skips_the_preferred_rule_once_the_delay_expired():
    rule = BatchRule(8, (2,), 1000)
    assert next_batch(queue(*[1] * 6), 0.0009, rule).send == 2
    assert next_batch(queue(*[1] * 6), 0.001, rule).send == 6  # at the deadline: all, beyond 2
    assert next_batch(queue(*[1] * 10), 0.002, rule).send == 8  # but never beyond max_batch_size


def test_next_batch_counts_batch_elements_not_requests():
    rule = BatchRule(8, (4,), 1000)
    assert next_batch(queue(2, 2, 3), 0.0, rule).send == 2  # 2 + 2 = 4 elements: preferred
    assert next_batch(queue(2, 1), 0.0, rule) == Decision(0, 0.001)  # 3 elements: wait
    # 3 + 3 jumps past the largest preferred size 4 with none reached: the 3 go at once
    assert next_batch(queue(3, 3), 0.0, rule) == Decision(1, 0.0, True)
    # one request of 5 elements is already past 4: it goes at once
    assert next_batch(queue(5), 0.0, rule) == Decision(1, 0.0, True)


def test_next_batch_stops_at_the_first_request_that_does_not_fit():
    rule = BatchRule(8, (), 5000)
    # 4 + 3 = 7; the 2 would make 9 > 8: the batch is full although the 1 behind it would fit
    assert next_batch(queue(4, 3, 2, 1), 0.0, rule) == Decision(2, 0.0, True)
    assert next_batch(queue(4, 3), 0.0, rule) == Decision(0, 0.005)  # 7 < 8 fits more: wait


# ------------------------------------------------------------------ the decision counts the payload

def test_a_payload_at_the_largest_preferred_size_takes_one_more():
    """The first request past the largest preferred size marks a best batch of 0 requests, and 0
    means "none yet" (``best_preferred_batch_size == 0``): the next request marks 1, so one joins."""
    rule = BatchRule(12, (3,), 150_000)
    assert next_batch(queue(1, 1, 1, 1), 0.0, rule, payload=3) == Decision(1, 0.0, True)
    assert next_batch(queue(1), 0.0, rule, payload=3) == Decision(1, 0.0, True)  # past 3: it cannot grow
    rule = BatchRule(8, (), 150_000)
    assert next_batch(queue(1, 1), 0.0, rule, payload=8) == Decision(0, 0.0, True)  # full: nothing fits


def test_every_size_test_counts_the_payload():
    rule = BatchRule(16, (4, 8), 150_000)
    # payload 2: the preferred sizes are reached at 2 and at 6 pending requests; the best is 6
    assert next_batch(queue(*[1] * 7), 0.0, rule, payload=2) == Decision(6, 0.0)
    assert next_batch(queue(1), 0.0, rule, payload=2) == Decision(0, 0.15)  # 3 elements: wait
    # delay 0: the payload closes at the first preferred size the arrivals make
    assert next_batch(queue(1, 1), 0.0, BatchRule(8, (4, 8)), payload=3) == Decision(1, 0.0, True)
    # after the delay: what fits joins, up to max_batch_size with the payload
    assert next_batch(queue(*[1] * 9), 1.0, rule, payload=10) == Decision(6, 1.0, True)


# ------------------------------------------------------------------ the batcher's state

def test_an_arrival_wakes_the_batcher_only_at_the_next_preferred_size():
    b = DynamicBatcher(BatchRule(8, (4,), 100_000))
    assert b.arrive(QueuedRequest(0.0)) is True  # a new payload: next_preferred_batch_size_ is 0
    assert b.run(0.0) == [] and b.wake_at == pytest.approx(0.1) and b.next_preferred == 4
    assert [b.arrive(QueuedRequest(0.001 * i)) for i in (1, 2, 3)] == [False, False, True]  # 4 queued
    taken = b.run(0.003)
    assert [len(p) for p in taken] == [4] and taken[0].state == TAKEN and b.limiter.idle == 0


def test_a_waiting_payload_keeps_taking_requests_until_an_instance_takes_it():
    b = DynamicBatcher(BatchRule(12, (3,), 150_000))
    b.limiter.idle = 0  # the instance is busy
    for _ in range(3):
        b.arrive(QueuedRequest(0.0))
    assert b.run(0.0) == [] and len(b.payload) == 3 and b.payload.state == WAITING
    assert not b.saturated  # a preferred size with a delay does not close the payload
    for _ in range(3):
        woken = b.arrive(QueuedRequest(0.001))
    assert woken and b.run(0.001) == []
    assert [len(p) for p in b.limiter.waiting] == [4] and b.limiter.waiting[0].state == WAITING  # 3 + 1
    assert len(b.queue) == 2 and b.next_preferred == 3  # a new payload waits for its delay or a third
    assert [len(p) for p in b.finish(0.02)] == [4]  # the instance frees and takes the 4


def test_at_most_two_payloads_per_instance_wait():
    b = DynamicBatcher(BatchRule(2, (), 0), instances=1)
    b.limiter.idle = 0
    for i in range(5):
        if b.arrive(QueuedRequest(0.0, id=i)):
            b.run(0.0)
    # delay 0: each arrival joins the payload until it is full; the third starts a second one, and
    # with two payloads waiting the fourth and fifth stay in the queue without waking the batcher
    assert [len(p) for p in b.limiter.waiting] == [2, 1] and len(b.queue) == 2
    assert not b.limiter.slot_free() and b.arrive(QueuedRequest(0.0)) is False
    # the instance frees and takes the first; the second fills up, a third payload starts
    assert [len(p) for p in b.finish(1.0)] == [2] and [len(p) for p in b.limiter.waiting] == [2, 2]


def test_without_prefetching_a_payload_forms_only_for_an_idle_instance():
    b = DynamicBatcher(BatchRule(8, (), 0), prefetch=False)
    b.limiter.idle = 0
    assert b.arrive(QueuedRequest(0.0)) is False and not b.limiter.slot_free()
    assert [len(p) for p in b.finish(1.0)] == [1]


def test_the_batcher_makes_every_payload_with_its_payload_factory():
    made = []

    def payload():  # what the fast driver passes: payloads of its own kind
        made.append(Payload())
        return made[-1]

    b = DynamicBatcher(BatchRule(2, (), 0), payload=payload)
    assert made == [b.payload]  # the first payload too
    taken = []
    for i in range(3):  # the idle instance takes the first; the next two fill a second payload,
        if b.arrive(QueuedRequest(0.0, id=i)):  # which closes at the preferred size 2: a third starts
            taken += b.run(0.0)
    assert taken == [made[0]] and list(b.limiter.waiting) == [made[1]] and b.payload is made[2]
    assert [[r.id for r in p] for p in made] == [[0], [1, 2], []]


def _waiting(rule, *payloads):
    """A batcher whose instance is idle, with payloads of (arrival, requests) waiting for it."""
    b = DynamicBatcher(rule)
    for arrival, n in payloads:
        p = Payload()
        p.add(*queue(*[1] * n, arrival=arrival))
        p.state = WAITING
        b.limiter.waiting.append(p)
    return b


def test_an_instance_merges_the_waiting_payloads_older_than_the_delay():
    b = _waiting(BatchRule(8, (), 1000), (0.0, 2), (0.0005, 3))
    assert [len(p) for p in b.limiter.take(0.0012)] == [2]  # the second's oldest waited 0.7 ms < 1 ms
    b = _waiting(BatchRule(8, (), 1000), (0.0, 2), (0.0005, 3))
    assert [len(p) for p in b.limiter.take(0.002)] == [5]  # both waited past the delay: one batch
    b = _waiting(BatchRule(4, (), 1000), (0.0, 2), (0.0001, 4))
    assert [len(p) for p in b.limiter.take(0.01)] == [2]  # 2 + 4 > 4: not merged...
    assert b.limiter.waiting[0].state == TAKEN  # ...but marked taken: it grows no more
    b = _waiting(BatchRule(8), (0.0, 2), (0.0, 3))
    assert [len(p) for p in b.limiter.take(1.0)] == [2]  # delay 0: never merged


# ------------------------------------------------------------------ schedules, both engines

@pytest.mark.parametrize("engine", BOTH)
def test_seven_pending_preferred_4_8_sends_4(engine):
    a = np.zeros(7)
    res = simulate_dynamic(a, Affine(1000, 0), 8, preferred_batch_sizes=(4, 8), engine=engine)
    # the 7 land together: the preferred 4 goes and closes its payload (delay 0), the 3 left fill the next
    assert batches(res) == [(0.0, 4), (0.001, 3)]
    res = simulate_dynamic(a, Affine(1000, 0), 8, max_queue_delay_us=5000, preferred_batch_sizes=(4, 8), engine=engine)
    assert batches(res) == [(0.0, 4), (0.005, 3)]  # with a delay the 3 left wait for the oldest's deadline


@pytest.mark.parametrize("engine", BOTH)
def test_requests_sent_apart_by_a_hair_are_batched_apart(engine):
    """The first request finds the instance idle and goes alone (delay 0); the 6 sent a moment later
    fill a payload while it runs: the preferred 4 closes it, the 2 left form the next one."""
    a = np.r_[0.0, np.full(6, 1e-6)]
    res = simulate_dynamic(a, Affine(1000, 0), 8, preferred_batch_sizes=(4, 8), engine=engine)
    assert [(round(s, 6), z) for s, z in batches(res)] == [(0.0, 1), (0.001, 4), (0.002, 2)]


@pytest.mark.parametrize("engine", BOTH)
def test_the_waiting_payload_grows_one_past_the_preferred_size(engine):
    """One request every 2 ms, t(B) = 20 + 5 B ms, preferred [3]: the first 3 go at 4 ms; the next 3
    fill a payload while the instance runs, and it takes one more (3 + 1); so does every later one."""
    res = simulate_dynamic(np.arange(19) * 2 * MS, Affine(20_000, 5000), 12, max_queue_delay_us=150_000,
                           preferred_batch_sizes=(3,), engine=engine)
    assert batches(res) == [(0.004, 3), (0.039, 4), (0.079, 4), (0.119, 4), (0.159, 4)]


@pytest.mark.parametrize("engine", BOTH)
def test_payloads_past_the_delay_merge_when_an_instance_takes_one(engine):
    a = np.r_[0.0, np.linspace(0.1, 0.6, 6) * MS]
    res = simulate_dynamic(a, Affine(5000, 0), 8, max_queue_delay_us=1000, preferred_batch_sizes=(2,), engine=engine)
    # 2 go at 0.1 ms. While they run a payload of 2 fills, takes one more (3), and a payload of 2
    # forms behind it; at 5.1 ms its oldest has waited past the 1 ms delay: the instance takes 3 + 2
    assert batches(res) == [(0.0001, 2), (0.0051, 5)]


@pytest.mark.parametrize("engine", BOTH)
def test_delay_does_not_bound_the_time_queued_behind_a_busy_instance(engine):
    a = np.r_[0.0, np.linspace(1, 5, 5) * MS]
    res = simulate_dynamic(a, Affine(10_000, 0), 8, max_queue_delay_us=100, engine=engine)
    assert batches(res) == [(0.0001, 1), (0.0101, 5)]
    queued = res.records["start"][1:] - a[1:]
    assert queued.min() > 100e-6 * 40  # queued far longer than max_queue_delay


@pytest.mark.parametrize("engine", BOTH)
def test_full_batch_goes_at_once(engine):
    a = np.arange(10) * 0.1 * MS
    res = simulate_dynamic(a, Affine(100, 10), 8, max_queue_delay_us=5000, engine=engine)
    assert batches(res)[0] == (round(7 * 0.1 * MS, 9), 8)  # the 8th arrival completes a batch


@pytest.mark.parametrize("engine", BOTH)
def test_instances_run_in_parallel(engine):
    res = simulate_dynamic(np.zeros(3), Affine(1000, 0), 1, instances=2, engine=engine)
    assert res.records["start"].tolist() == [0.0, 0.0, 0.001]
    assert sorted(res.records["instance"][:2].tolist()) == [0, 1]


def test_priority_levels_turn_prefetching_off():
    """With priority levels (or a queue policy) Triton forms a payload only for an idle instance:
    requests that arrive while it is busy wait in the queue, and the preferred rule cuts them then."""
    a = np.r_[0.0, np.linspace(1, 5, 5) * MS]
    kw = dict(max_queue_delay_us=100_000, preferred_batch_sizes=(2,))
    prefetching = simulate_dynamic(a, Affine(10_000, 0), 8, **kw)
    idle_only = simulate_dynamic(a, Affine(10_000, 0), 8, priority_levels=1, priorities=[1] * 6, **kw)
    # 2 go; a payload of 2 fills and takes a third; the last waits for its delay (5 + 100 ms)
    assert batches(prefetching) == [(0.001, 2), (0.011, 3), (0.105, 1)]
    assert batches(idle_only) == [(0.001, 2), (0.011, 2), (0.021, 2)]


def test_batch_elements_size_and_price_batches():
    # max_batch 8, preferred [4], delay 1 ms, t(B) = 1 + 0.1 B ms; requests of 2, 2 and 3 elements.
    # t=0: 2 elements, wait. t=0.1 ms: 2 + 2 = 4 is preferred: both go, 1.4 ms -> end 1.5 ms.
    # t=0.2 ms: 3 elements wait; the instance frees at 1.5 ms, past their deadline 1.2 ms: sent, 1.3 ms.
    a = np.array([0.0, 0.1, 0.2]) * MS
    res = simulate_dynamic(a, Affine(1000, 100), 8, max_queue_delay_us=1000, preferred_batch_sizes=(4,),
                           batch_elements=[2, 2, 3])
    assert batches(res) == [(0.0001, 2), (0.0015, 1)]
    assert res.batches["executed"].tolist() == [4, 3]
    assert res.records["finish"] == pytest.approx(np.array([1.5, 1.5, 2.8]) * MS)
    ones = simulate_dynamic(a, Affine(1000, 100), 8, max_queue_delay_us=1000, batch_elements=[1, 1, 1])
    plain = simulate_dynamic(a, Affine(1000, 100), 8, max_queue_delay_us=1000)
    assert ones.records["finish"].tolist() == plain.records["finish"].tolist()  # one element each: as without
    with pytest.raises(ValueError, match="batch_elements must be <= max_batch_size"):
        simulate_dynamic(a, Affine(1000, 100), 4, batch_elements=[1, 5, 1])
    with pytest.raises(ValueError, match="fast engine"):
        simulate_dynamic(a, Affine(1000, 100), 4, batch_elements=[1, 2, 1], engine="fast")


def test_queue_full_rejects_on_arrival():
    a = np.r_[0.0, np.linspace(1, 5, 5) * MS]
    res = simulate_dynamic(a, Affine(10_000, 0), 1, max_queue_size=2)
    assert res.records["rejected"].tolist() == [False, False, False, True, True, True]
    assert np.all(np.isnan(res.records["start"][3:]))
    assert res.summary(warmup=0)["rejected"] == 3


def test_timeout_reject():
    a = np.array([0.0, 1.0, 9.5]) * MS
    res = simulate_dynamic(a, Affine(10_000, 0), 1, default_timeout_us=3000, timeout_action="REJECT")
    r = res.records
    assert r["timed_out"].tolist() == [False, True, False]
    assert r["finish"][1] == pytest.approx(4 * MS)  # dropped when it had waited the timeout
    assert r["start"][2] == pytest.approx(10 * MS)
    s = res.summary(warmup=0)
    assert s["timed_out"] == 1 and s["completed"] == 2


def test_timeout_delay_moves_request_behind():
    a = np.array([0.0, 1.0, 9.0]) * MS
    res = simulate_dynamic(a, Affine(10_000, 0), 1, default_timeout_us=3000, timeout_action="DELAY")
    start = res.records["start"]
    assert start[2] == pytest.approx(10 * MS) and start[1] == pytest.approx(20 * MS)
    assert not res.records["timed_out"].any()


def test_priority_levels_serve_level_1_first_fifo_within_level():
    a = np.array([0.0, 1.0, 2.0, 3.0, 4.0]) * MS
    pr = [2, 2, 1, 2, 1]
    res = simulate_dynamic(a, Affine(10_000, 0), 1, priorities=pr, priority_levels=2)
    order = np.argsort(res.records["start"]).tolist()
    assert order == [0, 2, 4, 1, 3]
    assert res.records["priority"].tolist() == pr


def test_priority_queue_policy_per_level():
    a = np.array([0.0, 1.0, 2.0, 3.0]) * MS
    res = simulate_dynamic(a, Affine(10_000, 0), 1, priorities=[1, 2, 2, 1], priority_levels=2,
                           priority_queue_policy={2: QueuePolicy(max_queue_size=1)})
    assert res.records["rejected"].tolist() == [False, False, True, False]


def test_delay_action_stays_ahead_of_lower_levels():
    # level 1 times out after 3 ms with DELAY: req 1 moves behind req 3 (same level, not timed
    # out) but stays ahead of the level-2 request
    a = np.array([0.0, 1.0, 2.0, 9.0]) * MS
    res = simulate_dynamic(a, Affine(10_000, 0), 1, priorities=[1, 1, 2, 1], priority_levels=2,
                           priority_queue_policy={1: QueuePolicy(timeout_us=3000, timeout_action="DELAY")})
    assert (res.records["start"] / MS).round(6).tolist() == [0.0, 20.0, 30.0, 10.0]


CONFIGS = [
    dict(max_batch_size=1),
    dict(max_batch_size=8, max_queue_delay_us=500),
    dict(max_batch_size=16, preferred_batch_sizes=(4, 8), max_queue_delay_us=200, instances=2),
    dict(max_batch_size=8, instances=3),
    dict(max_batch_size=32, preferred_batch_sizes=(8, 16, 32), instances=2),
    dict(max_batch_size=8, max_queue_delay_us=3000, preferred_batch_sizes=(2, 6)),
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_fast_and_event_engines_agree(cfg):
    """The fast engine (`run_fast` where the payloads change nothing, else `next_batch` looked up)
    gives the event engine's schedule, ties included (a trace rounded to 1 ms)."""
    a = wl.rate_curve(np.tile([9000.0, 1000.0, 1000.0], 400), 12.0, seed=11)[:30_000]  # 10 ms bursts
    svc = Affine(300, 100)
    for arrivals in (a, wl.trace(np.round(a[:5000], 3))):
        fast = simulate_dynamic(arrivals, svc, engine="fast", **cfg)
        ev = simulate_dynamic(arrivals, svc, engine="events", **cfg)
        for field in ("start", "finish", "instance"):
            assert np.array_equal(fast.records[field], ev.records[field]), field
        assert np.array_equal(fast.batches["size"], ev.batches["size"])


#: The faithful model where `run_payloads` drives it: delays, preferred sizes (one, several, the
#: largest below max_batch_size), several instances, light, heavy (the queue grows) and bursty load.
FAITHFUL = [
    dict(max_batch_size=8, max_queue_delay_us=500),
    dict(max_batch_size=16, preferred_batch_sizes=(4, 8), max_queue_delay_us=200, instances=2),
    dict(max_batch_size=32, max_queue_delay_us=2000),
    dict(max_batch_size=8, preferred_batch_sizes=(2, 6)),
    dict(max_batch_size=8, preferred_batch_sizes=(3,), max_queue_delay_us=40_000, instances=3),
    dict(max_batch_size=32, preferred_batch_sizes=(8, 16, 32), max_queue_delay_us=100, instances=4),
    dict(max_batch_size=4, preferred_batch_sizes=(1, 2, 3, 4), max_queue_delay_us=1000, instances=2),
]
LOADS = [("light", lambda: wl.poisson(2000.0, 6000, seed=21)),
         ("heavy", lambda: wl.poisson(30_000.0, 6000, seed=22)),
         ("bursts", lambda: wl.rate_curve(np.tile([40_000.0] + [500.0] * 5, 100), 1.2, seed=23)[:6000]),
         ("ties", lambda: wl.trace(np.round(wl.poisson(6000.0, 6000, seed=24), 3)))]


@pytest.mark.parametrize("cfg", FAITHFUL)
@pytest.mark.parametrize("load", [name for name, _ in LOADS])
def test_the_fast_faithful_driver_is_the_event_engine_bit_for_bit(cfg, load):
    """`run_payloads` (the default where the payloads matter) gives every request the batch, start,
    finish and instance the event engine (`run_events`, the reference) gives it, to the bit."""
    arrivals = dict(LOADS)[load]()
    svc = Affine(300, 100)
    fast = simulate_dynamic(arrivals, svc, engine="fast", **cfg)
    ev = simulate_dynamic(arrivals, svc, engine="events", **cfg)
    assert fast.records.tobytes() == ev.records.tobytes()
    assert fast.batches.tobytes() == ev.batches.tobytes()


@pytest.mark.parametrize("cfg", FAITHFUL)
def test_the_looked_up_decision_is_next_batchs(cfg):
    """`looked_up`'s answers equal `next_batch`'s on queues of one-element requests, whatever the
    payload, queue length (past max_batch_size + 1 too) and time (before, at and after the delay)."""
    rule = BatchRule(cfg["max_batch_size"], cfg.get("preferred_batch_sizes", ()), cfg.get("max_queue_delay_us", 0))
    decide = looked_up(rule)
    arrivals: list[float] = []
    by_index = looked_up(rule, arrivals.__getitem__)  # as `run_payloads` asks it: requests named by index
    rng = np.random.default_rng(5)
    for _ in range(3000):
        arrivals[:] = np.sort(rng.uniform(0, 0.004, rng.integers(1, rule.max_batch_size + 4))).tolist()
        pending = [QueuedRequest(t, 1, 1, i) for i, t in enumerate(arrivals)]
        now = max(arrivals[-1], rng.choice([arrivals[0] + rule.delay_s, rng.uniform(arrivals[-1], 0.006)]))
        held = int(rng.integers(0, rule.max_batch_size + 1))
        assert decide(pending, now, rule, held) == next_batch(pending, now, rule, held)
        assert by_index(deque(range(len(arrivals))), now, rule, held) == next_batch(pending, now, rule, held)


def test_the_fast_driver_runs_only_where_the_payloads_change_nothing():
    assert coincides(BatchRule(8)) and coincides(BatchRule(1, (), 500))
    assert not coincides(BatchRule(8, (4,))) and not coincides(BatchRule(8, (), 500))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_schedule_invariants(cfg):
    a = wl.poisson(6000.0, 20_000, seed=12)
    res = simulate_dynamic(a, Table([1, 8, 32], [400, 900, 2500]), **cfg)
    r, b = res.records, res.batches
    m = cfg["max_batch_size"]
    assert np.all(r["start"] >= r["arrival"]) and np.all(r["finish"] > r["start"])
    assert b["size"].min() >= 1 and b["size"].max() <= m
    assert np.all(np.diff(r["start"]) >= 0)  # FIFO with one priority level
    assert b["size"].sum() == a.size
    for inst in range(cfg.get("instances", 1)):  # an instance runs one batch at a time
        bi = b[b["instance"] == inst]
        assert np.all(bi["start"][1:] >= bi["end"][:-1])
    if cfg.get("max_queue_delay_us", 0) == 0 and len(cfg.get("preferred_batch_sizes", ())) == 0:
        # work conserving: a request that waits found every instance busy
        waiting = r["start"] > r["arrival"]
        busy = (np.searchsorted(np.sort(b["start"]), r["arrival"], side="right")
                - np.searchsorted(np.sort(b["end"]), r["arrival"], side="right"))
        assert np.all(busy[waiting] == cfg.get("instances", 1))


def test_engine_choice_and_argument_errors():
    a = wl.poisson(100.0, 100, seed=1)
    with pytest.raises(ValueError, match="fast engine"):
        simulate_dynamic(a, Affine(1, 1), 4, max_queue_size=3, engine="fast")
    with pytest.raises(ValueError, match="sorted"):
        simulate_dynamic(a[::-1], Affine(1, 1), 4)
    with pytest.raises(ValueError, match="max_batch_size must be >= 1"):
        simulate_dynamic(a, Affine(1, 1), 0)
    with pytest.raises(ValueError, match="instances"):
        simulate_dynamic(a, Affine(1, 1), 4, instances=0)
    with pytest.raises(ValueError, match="priority_levels"):
        simulate_dynamic(a, Affine(1, 1), 4, priorities=np.ones(100, int))
    with pytest.raises(ValueError, match=r"priorities must be in \[1, 2\]"):
        simulate_dynamic(a, Affine(1, 1), 4, priorities=np.full(100, 3), priority_levels=2)
    with pytest.raises(ValueError, match="timeout_action"):
        simulate_dynamic(a, Affine(1, 1), 4, timeout_action="DROP")
    with pytest.raises(ValueError, match="batch-level model"):
        simulate_dynamic(a, object(), 4)
    with pytest.raises(ValueError, match="warmup"):
        simulate_dynamic(a, Affine(1, 1), 4, warmup=1.5)


def test_empty_and_single_request():
    res = simulate_dynamic(np.empty(0), Affine(100, 0), 4)
    assert len(res) == 0 and res.summary()["completed"] == 0
    res = simulate_dynamic([0.5], Affine(100, 0), 4)
    s = res.summary(warmup=0)
    assert s["latency_ms"]["mean"] == pytest.approx(0.1)


def test_a_pluggable_decision_drives_the_event_engine() -> None:
    """`decide` replaces `next_batch` in the batcher (Lab 2 plugs the learner's rule in): the
    course's rule passed as another function gives the same schedule, another rule another one, and
    a decision that cannot be carried out is named instead of stalling the run."""
    arrivals = np.sort(np.random.default_rng(3).uniform(0, 0.2, 60))
    svc = Affine(2000, 500)
    base = simulate_dynamic(arrivals, svc, 8, max_queue_delay_us=5000, preferred_batch_sizes=(4,), warmup=0.0)
    same = simulate_dynamic(arrivals, svc, 8, max_queue_delay_us=5000, preferred_batch_sizes=(4,), warmup=0.0,
                            decide=lambda pending, now, rule, payload: next_batch(pending, now, rule, payload))
    assert np.array_equal(base.batches["size"], same.batches["size"])
    assert np.allclose(base.records["finish"], same.records["finish"])
    alone = simulate_dynamic(arrivals, svc, 8, warmup=0.0,
                             decide=lambda pending, now, rule, payload: Decision(1, now, True))
    assert set(alone.batches["size"].tolist()) == {1}
    with pytest.raises(ValueError, match="forever"):
        simulate_dynamic(arrivals, svc, 8, warmup=0.0, decide=lambda pending, now, rule, payload: Decision(0, now))
    with pytest.raises(ValueError, match="more than max_batch_size"):
        simulate_dynamic(arrivals, svc, 2, warmup=0.0, decide=lambda pending, now, rule, payload: Decision(1, now))
    with pytest.raises(ValueError, match="fast engine"):
        simulate_dynamic(arrivals, svc, 8, engine="fast", decide=lambda pending, now, rule, payload: Decision(1, now))
