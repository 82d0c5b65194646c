"""Triton's sequence batcher in batchlab.sim: direct slots, oldest candidates, backlog, idle reaper."""

import math

import numpy as np
import pytest

from batchlab.sim import workload as wl
from batchlab.sim.sequence import simulate_sequence
from batchlab.sim.service import Affine

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
