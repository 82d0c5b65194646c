"""Triton's dynamic batcher in batchlab.sim: the batching rule, queue policy, priorities, engines.

Expected schedules are worked out by hand from the rule in core's dynamic_batch_scheduler.cc
(see batchlab.sim.rule); each test would fail on a batcher that, e.g., sends the largest pending
batch, bounds queue time by max_queue_delay, or ignores the queue policy.
"""

import numpy as np
import pytest

from batchlab.sim import workload as wl
from batchlab.sim.dynamic import sends_by_queue_length, simulate_dynamic
from batchlab.sim.rule import INF, BatchRule, Decision, QueuedRequest, QueuePolicy, next_batch
from batchlab.sim.service import Affine, Table

MS = 1e-3
BOTH = ["fast", "events"]


def batches(res):
    return [(round(float(s), 9), int(z)) for s, z in zip(res.batches["start"], res.batches["size"])]


def decide(rule: BatchRule, n: int, oldest: float, now: float) -> tuple[int, float]:
    """`next_batch` for ``n`` one-element requests that all arrived at ``oldest``."""
    return next_batch([QueuedRequest(oldest)] * n, now, rule)


def test_rule_table():
    r = BatchRule(8, (4, 8), 0)
    assert decide(r, 7, 0.0, 0.0) == (4, 0.0)  # 7 pending, preferred [4, 8]: send 4
    assert decide(r, 3, 0.0, 0.0) == (3, 0.0)  # delay 0: whatever is pending
    assert decide(r, 8, 0.0, 0.0) == (8, 0.0)
    r = BatchRule(8, (), 1000)
    assert r.preferred == () and r.effective_preferred == (8,)  # empty preferred means [max_batch_size]
    assert decide(r, 3, 0.0, 0.0005) == (0, pytest.approx(0.001))  # wait for the oldest's deadline
    assert decide(r, 3, 0.0, 0.001) == (3, 0.001)  # waited the delay: send what is pending
    assert decide(r, 8, 0.0, 0.0) == (8, 0.0)
    r = BatchRule(8, (2,), 1000)
    assert decide(r, 6, 0.0, 0.0) == (2, 0.0)  # preferred reachable, delay not expired
    assert decide(r, 6, 0.0, 0.002) == (6, 0.002)  # expired: everything pending, beyond max preferred
    with pytest.raises(ValueError, match="exceeds max_batch_size"):
        BatchRule(4, (8,), 0)


def queue(*elements, arrival=0.0):
    """Requests of the given batch elements, all arriving at ``arrival``."""
    return [QueuedRequest(arrival, e) for e in elements]


def test_next_batch_delay_0_sends_the_largest_preferred_size_reachable():
    rule = BatchRule(8, (4, 8), 0)
    assert next_batch(queue(*[1] * 7), 0.0, rule) == Decision(4, 0.0)  # 7 pending: 4 go, 3 stay
    assert next_batch(queue(*[1] * 3), 0.0, rule) == Decision(3, 0.0)  # none reachable: all go, no wait
    assert next_batch(queue(*[1] * 8), 2.0, rule) == Decision(8, 2.0)
    assert next_batch(queue(*[1] * 11), 0.0, rule) == Decision(8, 0.0)  # at most max_batch_size
    assert next_batch([], 0.0, rule) == Decision(0, INF)


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
    assert next_batch(queue(*[1] * 6), 0.0009, rule) == Decision(2, 0.0009)
    assert next_batch(queue(*[1] * 6), 0.001, rule) == Decision(6, 0.001)  # at the deadline: all, beyond 2
    assert next_batch(queue(*[1] * 10), 0.002, rule) == Decision(8, 0.002)  # but never beyond max_batch_size


def test_next_batch_counts_batch_elements_not_requests():
    rule = BatchRule(8, (4,), 1000)
    assert next_batch(queue(2, 2, 3), 0.0, rule) == Decision(2, 0.0)  # 2 + 2 = 4 elements: preferred
    assert next_batch(queue(2, 1), 0.0, rule) == Decision(0, 0.001)  # 3 elements: wait
    # 3 + 3 jumps past the largest preferred size 4 with none reached: the 3 go at once
    assert next_batch(queue(3, 3), 0.0, rule) == Decision(1, 0.0)
    # one request of 5 elements is already past 4: it goes at once
    assert next_batch(queue(5), 0.0, rule) == Decision(1, 0.0)


def test_next_batch_max_batch_size_caps_the_elements():
    rule = BatchRule(4, (), 1000)  # no preferred sizes: [max_batch_size] = [4]
    assert next_batch(queue(*[1] * 6), 0.0, rule) == Decision(4, 0.0)
    assert next_batch(queue(2, 1, 2), 0.0, rule) == Decision(2, 0.0)  # 3 elements; + 2 would be 5 > 4
    assert next_batch(queue(2, 1, 2), 0.002, rule) == Decision(2, 0.002)


def test_next_batch_stops_at_the_first_request_that_does_not_fit():
    rule = BatchRule(8, (), 5000)
    # 4 + 3 = 7; the 2 would make 9 > 8: the batch is full although the 1 behind it would fit
    assert next_batch(queue(4, 3, 2, 1), 0.0, rule) == Decision(2, 0.0)
    assert next_batch(queue(4, 3), 0.0, rule) == Decision(0, 0.005)  # 7 < 8 fits more: wait


def test_fast_driver_lookup_matches_next_batch_on_any_queue():
    """The fast driver's premise: for one-element FIFO requests, next_batch depends only on how many are
    pending (up to max_batch_size) and on whether the oldest has waited the delay."""
    rng = np.random.default_rng(3)
    for rule in (BatchRule(8, (2, 6), 3000), BatchRule(16, (4, 8), 200), BatchRule(5, (), 0), BatchRule(1)):
        within, after = sends_by_queue_length(rule)
        for _ in range(200):
            n = int(rng.integers(1, 2 * rule.max_batch_size + 1))
            arrivals = np.sort(rng.uniform(0.0, 0.004, n)).tolist()
            now = arrivals[-1] + float(rng.uniform(0.0, 0.004))
            expired = rule.delay_s > 0 and now >= arrivals[0] + rule.delay_s
            sends = (after if expired else within)[min(n, rule.max_batch_size)]
            assert next_batch([QueuedRequest(t) for t in arrivals], now, rule).send == sends


@pytest.mark.parametrize("engine", BOTH)
def test_seven_pending_preferred_4_8_sends_4(engine):
    a = np.zeros(7)
    res = simulate_dynamic(a, Affine(1000, 0), 8, preferred_batch_sizes=(4, 8), engine=engine)
    assert batches(res) == [(0.0, 4), (0.001, 3)]
    res = simulate_dynamic(a, Affine(1000, 0), 8, max_queue_delay_us=5000, preferred_batch_sizes=(4, 8), engine=engine)
    assert batches(res) == [(0.0, 4), (0.005, 3)]  # the 3 left wait for the oldest's delay (t = 5 ms)


@pytest.mark.parametrize("engine", BOTH)
def test_delay_expiry_sends_partial_batch_at_the_deadline(engine):
    a = np.array([0.0, 0.2, 0.5]) * MS
    res = simulate_dynamic(a, Affine(100, 10), 8, max_queue_delay_us=1000, engine=engine)
    assert batches(res) == [(0.001, 3)]
    assert res.records["start"].tolist() == [0.001] * 3


@pytest.mark.parametrize("engine", BOTH)
def test_full_batch_goes_at_once(engine):
    a = np.arange(10) * 0.1 * MS
    res = simulate_dynamic(a, Affine(100, 10), 8, max_queue_delay_us=5000, engine=engine)
    assert batches(res)[0] == (round(7 * 0.1 * MS, 9), 8)  # the 8th arrival completes a batch


@pytest.mark.parametrize("engine", BOTH)
def test_batch_grows_while_instance_busy_and_delay_does_not_bound_queue_time(engine):
    a = np.r_[0.0, np.linspace(1, 5, 5) * MS]
    res = simulate_dynamic(a, Affine(10_000, 0), 8, max_queue_delay_us=100, engine=engine)
    # alone, the first request waits out its delay (0.1 ms); the five that arrive during its
    # execution form one batch when the instance frees
    assert batches(res) == [(0.0001, 1), (0.0101, 5)]
    queued = res.records["start"][1:] - a[1:]
    assert queued.min() > 100e-6 * 40  # queued far longer than max_queue_delay


@pytest.mark.parametrize("engine", BOTH)
def test_expired_delay_sends_beyond_largest_preferred(engine):
    a = np.r_[0.0, np.linspace(0.1, 0.6, 6) * MS]
    res = simulate_dynamic(a, Affine(5000, 0), 8, max_queue_delay_us=1000, preferred_batch_sizes=(2,), engine=engine)
    # t=0: one pending, preferred 2 not reachable, delay not expired: wait; the arrival at 0.1 ms
    # makes 2 -> send 2. At 5.1 ms the oldest of the 5 left has waited > 1 ms: send all 5.
    assert batches(res) == [(0.0001, 2), (0.0051, 5)]


@pytest.mark.parametrize("engine", BOTH)
def test_instances_run_in_parallel(engine):
    res = simulate_dynamic(np.zeros(3), Affine(1000, 0), 1, instances=2, engine=engine)
    assert res.records["start"].tolist() == [0.0, 0.0, 0.001]
    assert sorted(res.records["instance"][:2].tolist()) == [0, 1]


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
    a = wl.mmpp((9000.0, 1000.0), (0.01, 0.02), 30_000, seed=11)
    svc = Affine(300, 100)
    fast = simulate_dynamic(a, svc, engine="fast", **cfg)
    ev = simulate_dynamic(a, svc, engine="events", **cfg)
    assert np.array_equal(fast.records["start"], ev.records["start"])
    assert np.array_equal(fast.records["finish"], ev.records["finish"])
    assert np.array_equal(fast.batches["size"], ev.batches["size"])
    assert np.array_equal(fast.records["instance"], ev.records["instance"])
    # ties: simultaneous arrivals (a trace rounded to 1 ms) are all visible to one decision
    t = wl.trace(np.round(a[:5000], 3))
    assert np.array_equal(simulate_dynamic(t, svc, engine="fast", **cfg).records["start"],
                          simulate_dynamic(t, svc, engine="events", **cfg).records["start"])


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
    """`decide` replaces `next_batch` in the event driver (Lab 2 plugs the learner's rule in): the
    course's rule passed as another function gives the same schedule, another rule another one, and
    a decision that cannot be carried out is named instead of stalling the run."""
    from batchlab.sim.rule import Decision, next_batch

    arrivals = np.sort(np.random.default_rng(3).uniform(0, 0.2, 60))
    svc = Affine(2000, 500)
    base = simulate_dynamic(arrivals, svc, 8, max_queue_delay_us=5000, preferred_batch_sizes=(4,), warmup=0.0)
    same = simulate_dynamic(arrivals, svc, 8, max_queue_delay_us=5000, preferred_batch_sizes=(4,), warmup=0.0,
                            decide=lambda pending, now, rule: next_batch(pending, now, rule))
    assert np.array_equal(base.batches["size"], same.batches["size"])
    assert np.allclose(base.records["finish"], same.records["finish"])
    alone = simulate_dynamic(arrivals, svc, 8, max_queue_delay_us=5000, warmup=0.0,
                             decide=lambda pending, now, rule: Decision(1, now))
    assert set(alone.batches["size"].tolist()) == {1}
    with pytest.raises(ValueError, match="forever"):
        simulate_dynamic(arrivals, svc, 8, warmup=0.0, decide=lambda pending, now, rule: Decision(0, now))
    with pytest.raises(ValueError, match="fast engine"):
        simulate_dynamic(arrivals, svc, 8, engine="fast", decide=lambda pending, now, rule: Decision(1, now))
