"""Triton's sequence batcher in batchlab.sim: direct slots, oldest candidates, backlog, idle reaper."""

import math

import numpy as np
import pytest

from batchlab.sim import workload as wl
from batchlab.sim.sequence import simulate_sequence
from batchlab.sim.service import Affine
from batchlab.batching.slots import SequenceRequest, SequenceSlots, SlotControl

SVC = Affine(1000, 100)  # t(b) = 1.0 ms + 0.1 ms per element


def seq_records(res, j):
    r = res.records
    return r[r["seq_id"] == j]


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_one_sequence_steps_follow_think_time(strategy):
    res = simulate_sequence([0.0], [5], SVC, max_batch_size=4, strategy=strategy, think_time_s=0.1)
    r = res.records
    t1 = SVC.time(1)
    assert r["step"].tolist() == [0, 1, 2, 3, 4]
    assert np.allclose(r["arrival"], np.arange(5) * (t1 + 0.1))
    assert np.allclose(r["finish"] - r["arrival"], t1)


def test_direct_pads_to_highest_ready_slot():
    # A (slot 0) ends after 2 steps; B (slot 1) goes on alone: its batches run slot 0 as a null request
    res = simulate_sequence([0.0, 0.0], [2, 6], SVC, max_batch_size=4, think_time_s=0.01)
    b = res.batches
    assert b["size"].tolist()[:2] == [2, 2]
    assert np.all(b["size"][2:] == 1) and np.all(b["executed"][2:] == 2)
    b_recs = seq_records(res, 1)
    assert np.allclose((b_recs["finish"] - b_recs["start"])[2:], SVC.time(2))
    s = res.summary(warmup=0)
    assert s["eta"] == pytest.approx(b["size"].sum() / b["executed"].sum()) and s["eta"] < 1


def test_oldest_batches_distinct_sequences_without_padding():
    starts = wl.poisson(200.0, 400, seed=1)
    steps = wl.uniform(3, 12).sample(400, 2)
    res = simulate_sequence(starts, steps, SVC, max_batch_size=8, strategy="oldest",
                            max_candidate_sequences=16, max_queue_delay_us=2000, think_time_s=0.01)
    b, r = res.batches, res.records
    assert np.all(b["executed"] == b["size"]) and res.summary()["eta"] == 1.0
    assert b["size"].max() <= 8 and b["size"].mean() > 1.5
    for k in np.flatnonzero(b["size"] > 1)[:50]:  # one request per sequence per batch
        seqs = r["seq_id"][r["batch_id"] == k]
        assert len(set(seqs.tolist())) == seqs.size
    # every sequence sends its steps in order, one at a time
    for j in range(20):
        sr = seq_records(res, j)
        assert sr["step"].tolist() == list(range(steps[j]))
        assert np.all(sr["arrival"][1:] >= sr["finish"][:-1])


def test_backlog_waits_for_a_free_slot():
    # two slots, three sequences at t=0: the third starts when the first END frees a slot
    res = simulate_sequence([0.0, 0.0, 0.0], [2, 4, 3], SVC, max_batch_size=2, think_time_s=0.0)
    c = seq_records(res, 2)
    a_end = seq_records(res, 0)[-1]
    assert c["start"][0] == pytest.approx(a_end["finish"])  # next batch after the END was taken
    assert c["start"][0] - c["arrival"][0] > 0


def test_instances_give_slots_in_parallel():
    res = simulate_sequence([0.0, 0.0], [1, 1], SVC, max_batch_size=1, instances=2)
    assert res.records["start"].tolist() == [0.0, 0.0]
    assert sorted(res.records["instance"].tolist()) == [0, 1]


def test_idle_reaper_force_ends_slow_clients():
    res = simulate_sequence([0.0], [3], SVC, max_batch_size=2, think_time_s=2.0)
    r = res.records
    assert r["rejected"].tolist() == [False, True]  # the 2nd request finds its sequence gone
    assert res.summary(warmup=0)["sequences_aborted"] == 1
    ok = simulate_sequence([0.0], [3], SVC, max_batch_size=2, think_time_s=2.0, max_sequence_idle_us=0)
    assert not ok.records["rejected"].any() and len(ok) == 3


def test_backlog_wait_longer_than_idle_limit_ends_the_sequence():
    # one slot; B waits 1.8 s in the backlog behind A (3 x 0.6 s) > 1 s idle: Triton's reaper
    # (idle clock from the request's arrival) force-ends B right after its first request
    svc = Affine(600_000, 0)
    res = simulate_sequence([0.0, 0.0], [3, 3], svc, max_batch_size=1)
    b = seq_records(res, 1)
    assert b["rejected"].tolist() == [False, True]
    assert b["start"][0] == pytest.approx(1.8)


def test_minimum_slot_utilization_waits_for_the_delay():
    res = simulate_sequence([0.0], [1], SVC, max_batch_size=4, max_queue_delay_us=10_000,
                            minimum_slot_utilization=0.5)
    assert res.records["start"][0] == math.nextafter(0.01, math.inf)  # strictly longer than the delay
    res = simulate_sequence([0.0, 0.0], [1, 1], SVC, max_batch_size=4, max_queue_delay_us=10_000,
                            minimum_slot_utilization=0.5)
    assert res.records["start"].tolist() == [0.0, 0.0]  # 2 of 4 slots ready: enough


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_stability(strategy):
    steps = wl.uniform(5, 30).sample(1500, 2)
    slow = simulate_sequence(wl.poisson(20.0, 1500, seed=1), steps, Affine(2000, 200), 8, strategy=strategy,
                             think_time_s=0.05, max_sequence_idle_us=0).summary()
    fast = simulate_sequence(wl.poisson(5.0, 1500, seed=1), steps, Affine(2000, 200), 8, strategy=strategy,
                             think_time_s=0.05).summary()
    assert slow["stable"] is False and fast["stable"] is True


@pytest.mark.parametrize("kwargs, msg", [
    (dict(strategy="newest"), "strategy"),
    (dict(preferred_batch_sizes=(2,)), "oldest strategy"),
    (dict(minimum_slot_utilization=1.5), "minimum_slot_utilization"),
    (dict(think="gamma"), "think"),
    (dict(think_time_s=-1), "think_time_s"),
])
def test_sequence_argument_errors(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        simulate_sequence([0.0], [2], SVC, 4, **kwargs)


def test_each_force_ended_sequence_leaves_one_refused_request():
    starts = wl.poisson(20.0, 600, seed=3)
    steps = wl.uniform(2, 10).sample(600, 4)
    res = simulate_sequence(starts, steps, SVC, 4, think_time_s=0.3, think="exponential", seed=5,
                            max_sequence_idle_us=400_000)
    r = res.records
    aborted = res.summary()["sequences_aborted"]
    assert aborted > 0 and r["rejected"].sum() == aborted
    rej_seqs = r["seq_id"][r["rejected"]]
    assert len(set(rej_seqs.tolist())) == rej_seqs.size  # one refusal each, then the client stops


# --- the mechanism alone: SequenceSlots on hand-worked cases -------------------------------------------


def first(seq, steps=3):
    """Step 0 of a sequence of ``steps`` requests, arriving at t = 0."""
    return SequenceRequest(seq, 0, steps == 1, 0.0)


def test_new_sequences_take_the_lowest_free_slot_then_the_backlog():
    slots = SequenceSlots("direct", instances=2, slots=2, idle_s=0.0)
    # lowest slot number first, instances alternating: (0, i0), (0, i1), (1, i0), (1, i1)
    assert [slots.arrive(first(j), 0.0) for j in range(4)] == [0, 1, 0, 1]
    assert slots.slot_of == {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}
    assert slots.arrive(first(4), 0.0) is None and slots.arrive(first(5), 0.0) is None  # no slot left
    assert [r.seq for r in slots.backlog] == [4, 5]


def test_backlog_is_first_come_first_served_and_a_freed_slot_is_reused():
    slots = SequenceSlots("direct", instances=1, slots=2, idle_s=0.0)
    for j in range(4):
        slots.arrive(first(j), 0.0)            # 0 -> slot 0, 1 -> slot 1; 2 and 3 wait, in that order
    assert slots.waiting[0].keys() == {0, 1}
    assert slots.release(1, 0.5) == 0          # sequence 2 (first in the backlog) takes slot 1 ...
    assert slots.slot_of[2] == (1, 0) and slots.waiting[0][1].seq == 2 and slots.waiting[0][1].queued == 0.5
    assert slots.release(0, 0.6) == 0 and slots.slot_of[3] == (0, 0)  # ... then sequence 3 slot 0
    slots.release(2, 0.7)                      # nobody waits: slot 1 is free for the next new sequence
    assert slots.free == [(1, 0)]
    assert slots.arrive(first(9), 0.8) == 0 and slots.slot_of[9] == (1, 0)


def test_direct_batch_pads_up_to_the_highest_ready_slot_and_an_end_frees_its_slot():
    slots = SequenceSlots("direct", instances=1, slots=4, idle_s=0.0)
    a, b, c = (SequenceRequest(seq, 0, False, 0.0) for seq in (10, 11, 12))
    for r in (a, b, c):
        slots.arrive(r, 0.0)                  # slots 0, 1, 2
    assert slots.take(0, 0.0) == [a, b, c]
    assert [tuple(SlotControl.of(r)) for r in (a, b, c)] == [(1, 0, 1, 11), (1, 0, 1, 12), (1, 0, 1, 13)]
    a2, c2 = SequenceRequest(10, 1, False, 1.0), SequenceRequest(12, 1, True, 1.0)
    slots.arrive(a2, 1.0)
    slots.arrive(c2, 1.0)                     # sequence 11 is still thinking: slot 1 has no request
    batch = slots.take(0, 1.0)
    assert batch == [a2, None, c2]            # slots 0 … 2, slot 1 run as padding
    assert [tuple(SlotControl.of(r)) for r in batch] == [
        (0, 0, 1, 11),   # a continuing step: neither START nor END; CORRID = sequence + 1
        (0, 0, 0, 0),    # padding: not READY, no correlation ID
        (0, 1, 1, 13),   # END: c's last request
    ]
    assert 12 not in slots.slot_of and slots.free == [(2, 0), (3, 0)]  # c's END freed slot 2 when taken
    assert slots.waiting[0] == {}


def test_oldest_takes_the_oldest_requests_and_frees_at_the_end_response():
    slots = SequenceSlots("oldest", instances=1, slots=3, idle_s=0.0)
    a, b = first(0), first(1)
    slots.arrive(a, 0.0)
    slots.arrive(b, 0.0)                      # a in slot 0, b in slot 1
    assert slots.take(0, 0.0, size=2) == [a, b]
    b2, a2 = SequenceRequest(1, 1, True, 1.0), SequenceRequest(0, 1, False, 2.0)
    slots.arrive(b2, 1.0)
    slots.arrive(a2, 2.0)
    assert slots.take(0, 2.0, size=1) == [b2]  # the oldest request, though its slot number is higher
    assert 1 in slots.slot_of                 # END taken: the slot stays until its response is out
    slots.finished(b2, 2.5)
    assert 1 not in slots.slot_of and slots.free == [(1, 0), (2, 0)]
    assert slots.waiting[0] == {0: a2}


def test_idle_reaper_frees_an_idle_slot_now_and_a_busy_one_after_its_request():
    slots = SequenceSlots("direct", instances=1, slots=2, idle_s=1.0)
    idle, busy = first(0), first(1)
    slots.arrive(idle, 0.0)
    slots.arrive(busy, 0.0)
    slots.take(0, 0.0)
    idle.finish = 0.1                          # answered; its client never sends again
    assert slots.reap(idle, 1.0) is None and 0 in slots.force_ended
    assert slots.slot_of == {1: (1, 0)} and slots.free == [(0, 0)]  # freed at once
    assert slots.reap(busy, 1.0) is None and 1 in slots.force_ended
    assert 1 in slots.slot_of                  # still running: its slot frees when it completes
    slots.finished(busy, 1.2)
    assert slots.slot_of == {} and slots.free == [(0, 0), (1, 0)]
    end = SequenceRequest(2, 2, True, 0.0)     # an END already sent is never reaped
    slots.arrive(end, 0.0)
    assert slots.reap(end, 1.0) is None and 2 not in slots.force_ended


def test_a_sequence_whose_idle_time_ran_out_in_the_backlog_ends_after_its_first_request():
    slots = SequenceSlots("direct", instances=1, slots=1, idle_s=1.0)
    slots.arrive(first(0), 0.0)
    late, on_time = first(1), SequenceRequest(2, 0, False, 0.5)
    slots.arrive(late, 0.0)
    slots.arrive(on_time, 0.5)
    slots.release(0, 1.0)                      # waited 1.0 s >= idle_s: it runs once, then ends
    assert slots.slot_of == {1: (0, 0)} and slots.force_ended == {1}
    slots.take(0, 1.0)
    slots.finished(late, 1.1)                  # its slot goes to sequence 2 (waited 0.6 s: not ended)
    assert slots.slot_of == {2: (0, 0)} and slots.force_ended == {1}


def test_the_next_request_after_a_force_end_is_refused():
    # one step of 1.1 ms, think time 1.5 s > idle 1 s: reaped at 1.0 s; step 1 at 1.5011 s is refused
    res = simulate_sequence([0.0], [4], SVC, max_batch_size=1, think_time_s=1.5)
    r = res.records
    assert r["rejected"].tolist() == [False, True] and r["step"].tolist() == [0, 1]
    assert r["arrival"][1] == pytest.approx(SVC.time(1) + 1.5) and r["finish"][1] == r["arrival"][1]
