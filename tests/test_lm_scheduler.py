"""Continuous batching scheduler and its admission policy (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.lm import (ContinuousBatcher, ContinuousScheduler, FCFSAdmission, GenerationRequest,
                         Sequence, ToyLM, encode, generate)
from batchlab.lm.scheduler import prefill_chunks
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.service import TokenCost


@pytest.fixture(scope="module")
def lm() -> ToyLM:
    return ToyLM.default()


def info(prompt: int, max_tokens: int, generated: int = 0) -> GenerationRequest:
    return GenerationRequest.reserving(None, prompt, max_tokens, generated)


def test_fcfs_admits_in_order_under_both_limits():
    policy = FCFSAdmission(max_active=3, kv_token_budget=100)
    waiting = [info(10, 20), info(10, 20), info(10, 20), info(10, 20)]
    assert policy.admit(waiting, []) == [0, 1, 2]            # max_active binds
    assert policy.admit(waiting, [info(10, 40)]) == [0]      # 50 + 30 = 80; +30 > 100
    # the head does not fit: nobody overtakes it (no head-of-line skipping)
    assert policy.admit([info(50, 40), info(1, 1)], [info(10, 40)]) == []


def test_fcfs_rejects_what_can_never_fit_and_bad_limits():
    policy = FCFSAdmission(max_active=2, kv_token_budget=64)
    with pytest.raises(ValueError, match="needs 70 KV tokens"):
        policy.check(info(30, 40))
    with pytest.raises(ValueError, match="max_active"):
        FCFSAdmission(max_active=0)


@pytest.mark.slow
def test_batcher_outputs_equal_solo_generation_and_respect_max_active(lm):
    prompts = [encode(t) for t in ("动态批处理", "一口锅", "序列批处理让", "拼锅", "KV cache")]
    specs = [(8, 0.0, 0), (5, 0.7, 3), (12, 0.0, 0), (3, 1.0, 9), (7, 0.0, 0)]
    batcher = ContinuousBatcher(lm, FCFSAdmission(max_active=2, kv_token_budget=4096))
    seqs = [Sequence(lm, p, m, t, s, ignore_eos=True, seq_id=i)
            for i, (p, (m, t, s)) in enumerate(zip(prompts, specs))]
    for s in seqs:
        batcher.submit(s)
    sizes = []
    while batcher.has_work:
        report = batcher.step()
        sizes.append(report.batch_size)
        assert report.batch_size <= 2
        for s in report.finished:
            assert s.cache is None  # KV freed at once
    assert max(sizes) == 2
    for s, p, (m, t, seed) in zip(seqs, prompts, specs):
        assert s.tokens == generate(lm, p, m, t, seed, ignore_eos=True)


def test_kv_budget_limits_admission(lm):
    batcher = ContinuousBatcher(lm, FCFSAdmission(max_active=8, kv_token_budget=40))
    seqs = [Sequence(lm, encode("一口锅"), 16, ignore_eos=True) for _ in range(3)]  # 20 each
    for s in seqs:
        batcher.submit(s)
    report = batcher.step()
    assert report.batch_size == 2 and report.n_waiting == 1
    assert report.kv_tokens == 2 * 4  # the prompts; the new tokens are fed next step
    with pytest.raises(ValueError, match="budget"):
        batcher.submit(Sequence(lm, encode("一口锅"), 60))


def test_cancel_frees_the_cache_and_the_slot(lm):
    batcher = ContinuousBatcher(lm, FCFSAdmission(max_active=1))
    a = Sequence(lm, encode("一口锅"), 50, ignore_eos=True)
    b = Sequence(lm, encode("拼锅"), 3, ignore_eos=True)
    batcher.submit(a)
    batcher.submit(b)
    batcher.step()
    assert batcher.active == [a]
    batcher.cancel(a)
    assert a.cache is None and a.finish_reason == "cancelled"
    report = batcher.step()
    assert [s for s, _ in report.emitted] == [b]


def test_policy_can_be_replaced():
    class ShortestFirst:
        def check(self, candidate):
            pass

        def admit(self, waiting, active):
            order = sorted(range(len(waiting)), key=lambda i: waiting[i].reserved_tokens)
            return order[:max(0, 2 - len(active))]

    lm = ToyLM.default()
    batcher = ContinuousBatcher(lm, ShortestFirst())
    long = Sequence(lm, encode("一口锅"), 30, ignore_eos=True)
    short = Sequence(lm, encode("一口锅"), 2, ignore_eos=True)
    mid = Sequence(lm, encode("一口锅"), 10, ignore_eos=True)
    for s in (long, short, mid):
        batcher.submit(s)
    report = batcher.step()
    assert set(report.admitted) == {short, mid}
    assert np.isclose(report.batch_size, 2)


def test_bounded_queue_and_lazy_caches(lm):
    batcher = ContinuousBatcher(lm, FCFSAdmission(max_active=1), max_waiting=2)
    seqs = [Sequence(lm, encode("一口锅"), 3) for _ in range(3)]
    batcher.submit(seqs[0])
    batcher.submit(seqs[1])
    assert all(s.cache is None for s in seqs)        # waiting sequences hold no KV memory
    with pytest.raises(ValueError, match="queue full"):
        batcher.submit(seqs[2])
    batcher.step()
    assert seqs[0].cache is not None and seqs[1].cache is None


# --- one continuous step: the simulator and the real batcher run the same ContinuousScheduler ---

def _real_steps(lm, prompts, max_tokens, **batcher_kwargs):
    """Step a real ContinuousBatcher to the end; per step: ids in the batch, admitted, finished,
    prompt tokens computed, decoding sequences."""
    batcher = ContinuousBatcher(lm, **batcher_kwargs)
    seqs = [Sequence(lm, [5 + (i + j) % 40 for j in range(n)], m, ignore_eos=True, seq_id=i)
            for i, (n, m) in enumerate(zip(prompts, max_tokens))]
    for s in seqs:
        batcher.submit(s)
    steps = []
    while batcher.has_work:
        report = batcher.step()
        batch = [s.seq_id for s, _ in report.emitted]
        new = [s.seq_id for s in report.admitted]
        steps.append((batch, new, sorted(s.seq_id for s in report.finished),
                      sum(prompts[i] for i in new), len(batch) - len(new)))
    return steps


def _simulated_steps(prompts, max_tokens, **sim_kwargs):
    """The same per-step view reconstructed from `simulate_continuous`'s records (all arrive at 0)."""
    res = simulate_continuous(np.zeros(len(prompts)), prompts, max_tokens,
                              TokenCost(prefill_per_token=1, decode_base=10, decode_per_seq=1), warmup=0.0, **sim_kwargs)
    r, b = res.records, res.batches
    done = np.searchsorted(b["end"], r["finish"])  # the iteration each request finished in
    steps = []
    for k in range(b.size):
        batch = [i for i in range(r.size) if r["batch_id"][i] <= k <= done[i]]
        new = [i for i in range(r.size) if r["batch_id"][i] == k]
        steps.append((batch, new, [i for i in range(r.size) if done[i] == k],
                      int(b["prefill_tokens"][k]), int(b["decode_seqs"][k])))
    return steps


@pytest.mark.parametrize("prompts, max_tokens, real, sim", [
    # max_active binds: a finished sequence is replaced in the next step
    ([3, 5, 2, 4, 6], [6, 2, 4, 1, 3], dict(policy=FCFSAdmission(max_active=2)), dict(max_active=2)),
    # the KV budget binds: the policy reserves prompt + max_tokens (20 each, 2 in 40); the
    # simulator reserves the exact peak prompt + output - 1 (19 each, 2 in 38)
    ([4, 4, 4, 4], [16, 16, 16, 16], dict(policy=FCFSAdmission(max_active=8, kv_token_budget=40)),
     dict(max_active=8, kv_budget_tokens=38)),
    # max_num_tokens binds: whole prompts are admitted only while the iteration's tokens fit
    ([6, 5, 7, 3, 8], [4, 6, 2, 5, 3], dict(policy=FCFSAdmission(max_active=8), max_num_tokens=12),
     dict(max_active=8, max_num_tokens=12)),
])
def test_simulator_and_real_batcher_make_the_same_decisions(lm, prompts, max_tokens, real, sim):
    got_real = _real_steps(lm, prompts, max_tokens, **real)
    got_sim = _simulated_steps(prompts, max_tokens, **sim)
    assert got_real == got_sim
    # not trivial: several run at once, and the limit makes somebody wait for a later step
    assert max(len(s[0]) for s in got_real) >= 2 and any(s[1] for s in got_real[1:])


def test_both_paths_step_the_one_scheduler(lm, monkeypatch):
    calls = []
    real_schedule = ContinuousScheduler.schedule
    monkeypatch.setattr(ContinuousScheduler, "schedule", lambda self: calls.append(self) or real_schedule(self))
    res = simulate_continuous([0.0, 0.0, 0.1], [3, 4, 5], [2, 3, 4], TokenCost(1, 10, 1), max_active=2)
    assert len(calls) == res.batches.size
    calls.clear()
    steps = _real_steps(lm, [3, 4, 5], [2, 3, 4], policy=FCFSAdmission(max_active=2))
    assert len(calls) == len(steps)


def test_on_demand_evicts_the_newest_and_recomputes_it():
    # budget 10: A (prompt 4) and B (prompt 4) fit; each decode then needs one more KV slot
    scheduler = ContinuousScheduler(FCFSAdmission(max_active=4, kv_token_budget=10),
                                    kv_token_budget=10, kv_policy="on_demand")
    a, b = (GenerationRequest(name, 4, 5, reserved_tokens=8) for name in "AB")
    scheduler.submit(a)
    scheduler.submit(b)
    plan = scheduler.schedule()
    assert plan.admitted == [a, b] and plan.prefill == [(a, 4), (b, 4)] and plan.kv_tokens == 8
    scheduler.complete(plan)                                   # both hold 4 KV tokens, 1 generated
    assert (a.reserved_tokens, scheduler.kv_used) == (4 + 1, 8)  # on demand: held + next token
    plan = scheduler.schedule()                                # 8 + 2 decodes = 10: fits
    assert plan.decode == [a, b] and plan.kv_tokens == 10
    scheduler.complete(plan)
    plan = scheduler.schedule()                                # 10 + 2 > 10: B (newest) goes
    assert b.preemptions == 1 and list(scheduler.waiting) == [b]
    assert (b.prefill_target, b.prefilled, b.kv_tokens, b.recomputing) == (4 + 2, 0, 0, True)
    assert plan.decode == [a] and plan.kv_tokens == 5 + 1
    assert scheduler.complete(plan) == []
    for generated in (4, 5):  # B needs 6 + A's growth 1 next to A's 6: it waits for A to end
        plan = scheduler.schedule()
        assert plan.admitted == [] and plan.decode == [a]
        assert scheduler.complete(plan) == ([a] if generated == 5 else []) and a.generated == generated
    assert scheduler.kv_used == 0 and scheduler.running == []
    plan = scheduler.schedule()  # B comes back: prompt + its 2 tokens recomputed, 1 new token
    assert plan.admitted == [b] and plan.prefill == [(b, 6)] and plan.useful_tokens == 1
    scheduler.complete(plan)
    assert (b.generated, b.kv_tokens, b.recomputing) == (3, 6, False)


@pytest.mark.parametrize("remaining, n_decoding, budget, want", [
    ([100], 0, 32, [32]),               # one long prompt: the whole budget
    ([100], 4, 32, [28]),               # 4 decodes take their token first
    ([10, 100, 5], 4, 32, [10, 18, 0]), # in queue order: the first finishes, the second gets the rest
    ([3, 4], 0, 32, [3, 4]),            # short prompts: never more than what remains
    ([50, 50], 32, 32, [0, 0]),         # the decodes fill the budget: no prompt token this iteration
    ([50], 40, 32, [0]),                # more decodes than the budget: no negative chunk
    ([], 5, 32, []),
])
def test_prefill_chunks_hand_worked(remaining, n_decoding, budget, want):
    assert prefill_chunks(remaining, n_decoding, budget) == want


def _chunked(split=prefill_chunks) -> tuple[ContinuousScheduler, list[GenerationRequest]]:
    scheduler = ContinuousScheduler(FCFSAdmission(max_active=4, kv_token_budget=None), max_num_tokens=8,
                                    chunked_prefill=True, prefill_split=split)
    reqs = [GenerationRequest(name, p, 3, reserved_tokens=p + 3) for name, p in (("A", 2), ("B", 10), ("C", 5))]
    for r in reqs:
        scheduler.submit(r)
    return scheduler, reqs


def test_the_default_split_runs_in_schedule():
    scheduler, (a, b, c) = _chunked()
    plan = scheduler.schedule()                       # budget 8: A 2, B 6, C waits
    assert plan.prefill == [(a, 2), (b, 6)] and plan.batch == [a, b] and plan.prefill_tokens == 8
    scheduler.complete(plan)
    plan = scheduler.schedule()                       # A decodes (1), B its last 4, C 3
    assert plan.decode == [a] and plan.prefill == [(b, 4), (c, 3)]


def test_the_split_is_replaceable_per_scheduler():
    calls = []

    def last_first(remaining, n_decoding, max_num_tokens):  # gives the room to the newest prompt first
        calls.append((list(remaining), n_decoding, max_num_tokens))
        room, out = max_num_tokens - n_decoding, []
        for left in reversed(remaining):
            out.append(max(0, min(left, room)))
            room -= out[-1]
        return out[::-1]

    scheduler, (a, b, c) = _chunked(last_first)
    plan = scheduler.schedule()
    assert calls == [([2, 10, 5], 0, 8)] and plan.prefill == [(b, 3), (c, 5)]
    default, _ = _chunked()
    assert default.prefill_split is prefill_chunks      # the other schedulers keep the library's rule


@pytest.mark.parametrize("bad, why", [
    (lambda r, d, m: [m] * len(r), "does not fit"),          # more than the budget
    (lambda r, d, m: [1] * (len(r) - 1), "does not fit"),    # a chunk missing
    (lambda r, d, m: [-1] + [0] * (len(r) - 1), "does not fit"),
])
def test_a_split_that_does_not_fit_is_one_clear_error(bad, why):
    scheduler, _ = _chunked(bad)
    with pytest.raises(ValueError, match=why):
        scheduler.schedule()


def test_whole_prompts_do_not_call_the_split():
    def never(*args):
        raise AssertionError("called")
    scheduler = ContinuousScheduler(FCFSAdmission(max_active=4, kv_token_budget=None), prefill_split=never)
    scheduler.submit(GenerationRequest("A", 7, 2, reserved_tokens=9))
    assert scheduler.schedule().prefill[0][1] == 7
