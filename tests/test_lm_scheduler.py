"""The continuous-batching scheduler (`batchlab.batching.Scheduler`, V1 rules over a block manager), its
policies, and the real `ContinuousBatcher` that runs it on the toy LM (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.batching import (BlockManager, GenerationRequest, OnDemandAdmission, ReserveAdmission, Scheduler,
                               prefill_chunks, whole_prompts)
from batchlab.lm import ContinuousBatcher, Sequence, ToyLM, encode, generate
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.service import TokenCost


@pytest.fixture(scope="module")
def lm() -> ToyLM:
    return ToyLM.default()


def req(name: object, prompt: int, max_tokens: int, salt: int = 0) -> GenerationRequest:
    return GenerationRequest(name, [5 + (j * 7 + salt * 13) % 40 for j in range(prompt)], max_tokens)


def scheduler(num_blocks: int | None = None, admission=None, block_size: int = 4, caching: bool = False,
              **kwargs) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, block_size, caching), admission or OnDemandAdmission(), **kwargs)


def run_step(s: Scheduler):
    """One step: plan it, 'sample' token 9 for whoever finishes its input, complete it."""
    plan = s.schedule()
    return plan, s.complete(plan, [9] * len(plan.work))


# --- V1's rules -------------------------------------------------------------------------------------

def test_running_requests_are_scheduled_before_waiting_ones():
    s = scheduler(max_active=4, max_num_tokens=8, step_policy="chunked")
    a, b, c = req("A", 6, 3), req("B", 10, 3), req("C", 5, 3)
    for r in (a, b):
        s.submit(r)
    plan, _ = run_step(s)                                       # A 6, B 2 (part-way)
    assert plan.work == [(a, 6), (b, 2)] and plan.admitted == [a, b]
    s.submit(c)
    plan, _ = run_step(s)                                       # A decodes, B continues, C waits
    assert plan.work == [(a, 1), (b, 7)] and plan.admitted == [] and list(s.waiting) == [c]


def test_a_request_starts_only_if_it_gets_a_token_of_the_budget():
    s = scheduler(max_active=8, max_num_tokens=3, step_policy="chunked")
    for name in "ABCD":
        s.submit(req(name, 1, 5))
    plan, _ = run_step(s)                                       # three one-token prompts fill the budget
    assert [r.seq_id for r in plan.admitted] == ["A", "B", "C"]
    plan, _ = run_step(s)                                       # three decodes: no token left for D
    assert len(plan.decode) == 3 and plan.admitted == [] and [r.seq_id for r in s.waiting] == ["D"]
    assert [r.seq_id for r in s.running] == ["A", "B", "C"]     # D did not become running without a token


def test_the_newest_is_preempted_and_nobody_is_admitted_in_that_step():
    # a pool of 4 blocks of 4 tokens: A and B (4-token prompts) take 1 block each, then grow
    s = scheduler(num_blocks=4, max_active=4)
    a, b, c = req("A", 4, 9), req("B", 4, 9), req("C", 1, 1)
    s.submit(a)
    s.submit(b)
    run_step(s)                                                 # both prompts: 2 blocks
    run_step(s)                                                 # the decodes cross into a 2nd block each: 4
    s.submit(c)                                                 # C would fit a block later; it must wait
    for _ in range(3):
        plan, _ = run_step(s)
    plan, _ = run_step(s)                                       # A needs a 3rd block: B (newest) goes
    assert plan.preempted == [b] and plan.admitted == [] and plan.work == [(a, 1)]
    assert list(s.waiting) == [b, c] and b.preemptions == 1 and b.computed == 0 and b.table.blocks == []


def test_reserve_and_on_demand_are_two_policies_over_one_block_manager():
    # 8 blocks of 4 tokens; 3 requests of 4 + 8 tokens (3 blocks at their end)
    reserve, on_demand = scheduler(8, ReserveAdmission()), scheduler(8, OnDemandAdmission())
    for s in (reserve, on_demand):
        for name in "ABC":
            s.submit(req(name, 4, 8))
    plan, _ = run_step(reserve)
    assert len(plan.admitted) == 2 and reserve.blocks.num_used == 6    # their whole future, 3 blocks each
    plan, _ = run_step(on_demand)
    assert len(plan.admitted) == 3 and on_demand.blocks.num_used == 3  # what they hold: 1 block each
    preempted = {"reserve": 0, "on_demand": 0}
    for name, s in (("reserve", reserve), ("on_demand", on_demand)):
        while s.has_work:
            plan, _ = run_step(s)
            preempted[name] += len(plan.preempted)
        assert s.blocks.num_used == 0
    assert preempted == {"reserve": 0, "on_demand": 1}


def test_a_preempted_request_recomputes_only_what_is_no_longer_cached():
    # 6 blocks of 4 tokens; A and B: 9-token prompts, 3 blocks each after their prompt
    s = scheduler(num_blocks=6, caching=True, max_active=2)
    a, b = req("A", 9, 12, salt=1), req("B", 9, 12, salt=2)
    s.submit(a)
    s.submit(b)
    for _ in range(4):
        plan, _ = run_step(s)
    assert plan.preempted == [] and len(b.table.blocks) == 3
    b_blocks = list(b.table.blocks)
    plan, _ = run_step(s)                                       # A grows into a 4th block: B goes
    assert plan.preempted == [b] and (b.generated, len(b.token_ids)) == (4, 13)
    assert s.blocks.num_cached_free == 2                        # B's full blocks stay cached, free
    while len(a.table.blocks) < 5:
        plan, _ = run_step(s)
    assert a.table.blocks[3:] == b_blocks[:0:-1]                # A's growth evicted B's blocks, tail first
    while b in s.waiting:
        plan, _ = run_step(s)
    # B comes back: its first block is still cached and shared; it computes the other 9 positions,
    # 8 of them for the second time
    assert plan.admitted == [b] and b.cached_tokens == 4 and b.table.blocks[0] == b_blocks[0]
    assert plan.work == [(b, 9)] and b.recomputed_tokens == 8 and plan.useful_tokens == 1


def test_the_step_policies():
    def first_steps(policy, **kw):
        s = scheduler(max_active=4, step_policy=policy, **kw)
        s.submit(req("A", 3, 4))
        run_step(s)
        s.submit(req("B", 20, 2))
        return [[(r.seq_id, n) for r, n in run_step(s)[0].work] for _ in range(3)]

    # prefill-first: a step with a prompt to start computes only prompts; A's decode waits
    assert first_steps("prefill_first") == [[("B", 20)], [("A", 1), ("B", 1)], [("A", 1)]]
    # mixed (Orca): B's whole prompt rides in A's decode step
    assert first_steps("mixed") == [[("A", 1), ("B", 20)], [("A", 1), ("B", 1)], [("A", 1)]]
    # chunked: the decode first, the prompt in chunks within the budget
    assert first_steps("chunked", max_num_tokens=8) == [[("A", 1), ("B", 7)], [("A", 1), ("B", 7)],
                                                        [("A", 1), ("B", 6)]]
    with pytest.raises(ValueError, match="needs max_num_tokens"):
        scheduler(step_policy="chunked")
    with pytest.raises(ValueError, match="step_policy"):
        scheduler(step_policy="whole")


@pytest.mark.parametrize("remaining, n_decoding, budget, want", [
    ([100], 0, 32, [32]),               # one long prompt: the whole budget
    ([100], 4, 32, [28]),               # 4 decodes take their token first
    ([10, 100, 5], 4, 32, [10, 18, 0]), # in queue order: the first finishes, the second gets the rest
    ([3, 4], 0, 32, [3, 4]),            # short prompts: never more than what remains
    ([50, 50], 32, 32, [0, 0]),         # the decodes fill the budget: no prompt token this step
    ([50], 40, 32, [0]),                # more decodes than the budget: no negative chunk
    ([], 5, 32, []),
])
def test_prefill_chunks_hand_worked(remaining, n_decoding, budget, want):
    assert prefill_chunks(remaining, n_decoding, budget) == want


@pytest.mark.parametrize("remaining, n_decoding, budget, want", [
    ([10, 20], 2, 40, [10, 20]),        # both fit beside the decodes
    ([10, 40, 5], 0, 40, [10, 0, 0]),   # the second does not fit: it waits, and so does the third
    ([60, 5], 0, 40, [60, 0]),          # larger than the budget: it runs as the step's only work
    ([60], 3, 40, [0]),                 # ... but not beside decodes
    ([7, 9], 0, float("inf"), [7, 9]),  # no budget
])
def test_whole_prompts_hand_worked(remaining, n_decoding, budget, want):
    assert whole_prompts(remaining, n_decoding, budget) == want


def test_the_split_is_replaceable_and_a_bad_one_is_one_clear_error():
    calls = []

    def last_first(remaining, n_decoding, max_num_tokens):   # the room to the newest prompt first
        calls.append((list(remaining), n_decoding, max_num_tokens))
        room, out = max_num_tokens - n_decoding, []
        for left in reversed(remaining):
            out.append(max(0, min(left, room)))
            room -= out[-1]
        return out[::-1]

    s = scheduler(max_active=4, max_num_tokens=8, step_policy="chunked")
    s.prefill_split = last_first
    a, b = req("A", 2, 3), req("B", 10, 3)
    s.submit(a)
    s.submit(b)
    plan = s.schedule()
    assert calls == [([2], 0, 8), ([2, 10], 0, 8)]               # asked as each waiting prompt is tried
    assert plan.work == [(a, 2), (b, 6)]                         # capped to the room the earlier chunk left
    assert scheduler(max_num_tokens=8, step_policy="chunked").prefill_split is prefill_chunks
    for bad in (lambda r, d, m: [m + 1] * len(r), lambda r, d, m: [1] * (len(r) - 1),
                lambda r, d, m: [-1] * len(r)):
        s = scheduler(max_num_tokens=8, step_policy="chunked")
        s.prefill_split = bad
        s.submit(req("A", 5, 2))
        with pytest.raises(ValueError, match="does not fit"):
            s.schedule()


def test_an_admission_policy_chooses_who_may_start():
    class ShortestFirst(ReserveAdmission):
        def select(self, waiting, running):
            return sorted(range(len(waiting)), key=lambda i: waiting[i].reserved_tokens)

    s = scheduler(num_blocks=6, admission=ShortestFirst())
    long, short, mid = req("long", 3, 17), req("short", 3, 2), req("mid", 3, 9)
    for r in (long, short, mid):
        s.submit(r)
    plan, _ = run_step(s)                                       # short (2 blocks) and mid (3); long waits
    assert plan.admitted == [short, mid] and list(s.waiting) == [long]

    class OffTheQueue(ReserveAdmission):
        def select(self, waiting, running):
            return [len(waiting)]

    s = scheduler(admission=OffTheQueue())
    s.submit(req("A", 2, 2))
    with pytest.raises(ValueError, match="outside the queue"):
        s.schedule()


def test_a_request_the_pool_could_never_hold_is_refused():
    with pytest.raises(ValueError, match="the pool holds 4 blocks"):
        scheduler(num_blocks=4).submit(req("A", 10, 10))


# --- the real batcher ---------------------------------------------------------------------------

@pytest.mark.slow
def test_batcher_outputs_equal_solo_generation_and_respect_max_active(lm):
    prompts = [encode(t) for t in ("动态批处理", "一口锅", "序列批处理让", "拼锅", "KV cache")]
    specs = [(8, 0.0, 0), (5, 0.7, 3), (12, 0.0, 0), (3, 1.0, 9), (7, 0.0, 0)]
    batcher = ContinuousBatcher(lm, max_active=2)
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
    assert max(sizes) == 2 and batcher.blocks.num_used == 0
    for s, p, (m, t, seed) in zip(seqs, prompts, specs):
        assert s.tokens == generate(lm, p, m, t, seed, ignore_eos=True)


def test_the_kv_pool_limits_admission(lm):
    # a pool of 3 blocks of 16: each sequence reserves 4 + 16 = 20 tokens, 2 blocks
    batcher = ContinuousBatcher(lm, max_active=8, kv_token_budget=48)
    seqs = [Sequence(lm, encode("一口锅"), 16, ignore_eos=True) for _ in range(3)]
    for s in seqs:
        batcher.submit(s)
    report = batcher.step()
    assert report.batch_size == 1 and report.n_waiting == 2
    assert (report.kv_blocks, report.kv_tokens) == (2, 4)  # reserved: 2 blocks, holding the prompt
    with pytest.raises(ValueError, match="the pool holds 3 blocks"):
        batcher.submit(Sequence(lm, encode("一口锅"), 60))
    with pytest.raises(ValueError, match="holds no block"):
        ContinuousBatcher(lm, kv_token_budget=8)


def test_cancel_frees_the_blocks_and_the_place(lm):
    batcher = ContinuousBatcher(lm, max_active=1)
    a = Sequence(lm, encode("一口锅"), 50, ignore_eos=True)
    b = Sequence(lm, encode("拼锅"), 3, ignore_eos=True)
    batcher.submit(a)
    batcher.submit(b)
    batcher.step()
    assert batcher.active == [a] and batcher.blocks.num_used == 4
    batcher.cancel(a)
    assert a.cache is None and a.finish_reason == "cancelled" and batcher.blocks.num_used == 0
    report = batcher.step()
    assert [s for s, _ in report.emitted] == [b]


def test_bounded_queue_and_lazy_caches(lm):
    batcher = ContinuousBatcher(lm, max_active=1, max_waiting=2)
    seqs = [Sequence(lm, encode("一口锅"), 3) for _ in range(3)]
    batcher.submit(seqs[0])
    batcher.submit(seqs[1])
    assert all(s.cache is None for s in seqs)        # waiting sequences hold no KV memory
    with pytest.raises(ValueError, match="queue full"):
        batcher.submit(seqs[2])
    batcher.step()
    assert seqs[0].cache is not None and seqs[1].cache is None


# --- one continuous step: the simulator and the real batcher run the same Scheduler ---------------

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
    done = np.searchsorted(b["end"], r["finish"])  # the step each request finished in
    steps = []
    for k in range(b.size):
        batch = [i for i in range(r.size) if r["batch_id"][i] <= k <= done[i]]
        new = [i for i in range(r.size) if r["batch_id"][i] == k]
        steps.append((batch, new, [i for i in range(r.size) if done[i] == k],
                      int(b["prefill_tokens"][k]), int(b["decode_seqs"][k])))
    return steps


@pytest.mark.parametrize("prompts, max_tokens, real, sim", [
    # max_active binds: a finished sequence is replaced in the next step
    ([3, 5, 2, 4, 6], [6, 2, 4, 1, 3], dict(max_active=2), dict(max_active=2)),
    # the pool binds: 3 blocks of 16, each reserves prompt + max_tokens = 20 tokens (2 blocks)
    ([4, 4, 4, 4], [16, 16, 16, 16], dict(max_active=8, kv_token_budget=48),
     dict(max_active=8, kv_token_budget=48)),
    # max_num_tokens binds: whole prompts start only while the step's tokens fit
    ([6, 5, 7, 3, 8], [4, 6, 2, 5, 3], dict(max_active=8, max_num_tokens=12), dict(max_active=8, max_num_tokens=12)),
])
def test_simulator_and_real_batcher_make_the_same_decisions(lm, prompts, max_tokens, real, sim):
    got_real = _real_steps(lm, prompts, max_tokens, **real)
    got_sim = _simulated_steps(prompts, max_tokens, **sim)
    assert got_real == got_sim
    # not trivial: the limit makes somebody wait for a later step
    assert any(s[1] for s in got_real[1:])


def test_both_paths_step_the_one_scheduler(lm, monkeypatch):
    calls = []
    real_schedule = Scheduler.schedule
    monkeypatch.setattr(Scheduler, "schedule", lambda self: calls.append(self) or real_schedule(self))
    res = simulate_continuous([0.0, 0.0, 0.1], [3, 4, 5], [2, 3, 4], TokenCost(1, 10, 1), max_active=2)
    assert len(calls) == res.batches.size
    calls.clear()
    steps = _real_steps(lm, [3, 4, 5], [2, 3, 4], max_active=2)
    assert len(calls) == len(steps)


def test_a_rollback_gives_back_the_blocks_past_the_kept_tokens():
    """What speculative decoding needs: drop rejected tokens and their KV, then decode on."""
    s = scheduler(num_blocks=8, caching=True, max_active=2)
    a = req("A", 6, 20)
    s.submit(a)
    for _ in range(8):
        run_step(s)                                             # 6 + 8 tokens, 13 positions of KV: 4 blocks
    assert (len(a.token_ids), a.computed, len(a.table.blocks)) == (14, 13, 4)
    s.rollback(a, 9)                                            # keep 9 tokens (3 generated), their KV
    assert (a.generated, a.computed, len(a.table.blocks), s.blocks.num_used) == (3, 9, 3, 3)
    a.token_ids.append(7)                                       # the target's own token
    a.generated += 1
    plan, _ = run_step(s)
    assert plan.work == [(a, 1)] and a.computed == 10 and len(a.token_ids) == 11
    with pytest.raises(ValueError, match="cannot roll"):
        s.rollback(a, 3)                                        # into its prompt
