"""Today's LLM-serving knobs on the real path (ContinuousBatcher on ToyLM) and in the simulator:
the step policies (chunked prefill under max_num_tokens), on-demand KV with recompute preemption,
prefix caching by shared blocks; each keeps the generated tokens identical (no server)."""

from __future__ import annotations

import numpy as np
import pytest

import batchlab.lm.batcher as batcher_module
from batchlab.batching import Scheduler
from batchlab.lm import ContinuousBatcher, Sequence, ToyLM, generate
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.service import TokenCost


@pytest.fixture(scope="module")
def lm() -> ToyLM:
    return ToyLM.default()


def prompt(n: int, salt: int = 0, shared: int = 0) -> list[int]:
    """n token ids; the first `shared` are the same for every salt."""
    return [5 + (j * 7 + (salt if j >= shared else 0) * 13) % 40 for j in range(n)]


def run(lm, prompts, max_tokens, submit_at=None, **kwargs):
    """Step a batcher to the end (request i submitted before step submit_at[i]); the reports and the
    token streams each sequence emitted."""
    batcher = ContinuousBatcher(lm, **kwargs)
    seqs = [Sequence(lm, p, m, ignore_eos=True, seq_id=i) for i, (p, m) in enumerate(zip(prompts, max_tokens))]
    submit_at = submit_at or [0] * len(seqs)
    streams, reports, k = {i: [] for i in range(len(seqs))}, [], 0
    while k <= max(submit_at) or batcher.has_work:
        for s, at in zip(seqs, submit_at):
            if at == k:
                batcher.submit(s)
        report = batcher.step()
        reports.append(report)
        for s, t in report.emitted:
            streams[s.seq_id].append(t)
        k += 1
    for s in seqs:
        assert streams[s.seq_id] == s.tokens  # each token streamed once, in order
    return reports, streams


def solo(lm, prompts, max_tokens):
    return {i: generate(lm, p, m, ignore_eos=True) for i, (p, m) in enumerate(zip(prompts, max_tokens))}


def record_sizes(monkeypatch):
    sizes = []
    real = batcher_module.step_chunks
    monkeypatch.setattr(batcher_module, "step_chunks", lambda lm, seqs, n: sizes.append(list(n)) or real(lm, seqs, n))
    return sizes


def test_chunked_prefill_keeps_the_token_budget_and_the_tokens(lm, monkeypatch):
    prompts = [prompt(n, i) for i, n in enumerate((70, 9, 41, 3, 30))]
    max_tokens = [6, 12, 5, 9, 7]
    sizes = record_sizes(monkeypatch)
    reports, streams = run(lm, prompts, max_tokens, max_active=4, max_num_tokens=16, step_policy="chunked")
    assert streams == solo(lm, prompts, max_tokens)
    assert max(sum(s) for s in sizes) <= 16 and max(max(s) for s in sizes) > 1
    # the 70-token prompt takes >= 5 steps; it streams nothing before its prefill completes
    first = next(k for k, r in enumerate(reports) if any(s.seq_id == 0 for s, _ in r.emitted))
    assert first >= 4 and any(r.batch_size > len(r.emitted) for r in reports)
    # a decoding sequence is never stalled by a prompt: it emits in every step until it ends
    for i in range(len(prompts)):
        at = [k for k, r in enumerate(reports) if any(s.seq_id == i for s, _ in r.emitted)]
        assert at == list(range(at[0], at[0] + max_tokens[i]))


def test_on_demand_preempts_and_recomputes_with_the_same_tokens(lm):
    prompts = [prompt(12, i) for i in range(4)]
    max_tokens = [20, 20, 20, 20]
    # a pool of 4 blocks of 16: each sequence ends at 32 tokens (2 blocks)
    reports, streams = run(lm, prompts, max_tokens, max_active=4, kv_token_budget=64, kv_policy="on_demand")
    assert streams == solo(lm, prompts, max_tokens)
    assert sum(len(r.preempted) for r in reports) >= 1 and sum(r.recomputed_tokens for r in reports) > 0
    assert max(len(r.admitted) for r in reports) >= 3   # reserving 2 blocks each, only 2 would run
    assert max(r.kv_blocks for r in reports) <= 4
    # reserving prompt + max_tokens: never preempted, at most 2 at once
    reports, streams_reserve = run(lm, prompts, max_tokens, max_active=4, kv_token_budget=64)
    assert streams_reserve == streams and not any(r.preempted for r in reports)
    assert max(r.batch_size for r in reports) == 2


def test_prefix_caching_shares_whole_blocks_with_the_same_tokens(lm):
    prompts = [prompt(60, i, shared=40) for i in range(3)] + [prompt(32, 9)] * 2
    max_tokens = [5, 4, 6, 3, 3]
    kw = dict(max_active=2, prefix_caching=True, kv_policy="on_demand")
    reports, streams = run(lm, prompts, max_tokens, submit_at=[0, 3, 3, 8, 14], **kw)
    assert streams == solo(lm, prompts, max_tokens)
    hits = {s.seq_id: n for r in reports for s, n in zip(r.admitted, r.cached_tokens)}
    # 40 shared tokens = 2 full blocks; an identical 32-token prompt reuses 1 (its last is computed)
    assert hits == {0: 0, 1: 32, 2: 32, 3: 0, 4: 16}
    # sharing, not copying: 1 and 2 run together on 0's two prefix blocks plus 2 blocks each
    both = next(r for r in reports if r.batch_size == 2 and r.admitted)
    assert both.kv_blocks == 2 + 2 * 2


def test_sequences_admitted_in_one_step_share_the_blocks_the_first_computes(lm):
    prompts = [prompt(40, i, shared=33) for i in range(3)]
    reports, streams = run(lm, prompts, [4, 4, 4], max_active=4, prefix_caching=True)
    assert streams == solo(lm, prompts, [4, 4, 4])
    assert reports[0].cached_tokens == [0, 32, 32] and reports[0].kv_blocks == 2 + 3


def test_chunked_prefill_with_prefix_caching_and_preemption_keeps_the_tokens(lm):
    prompts = [prompt(50, i, shared=33) for i in range(5)]
    max_tokens = [8, 12, 6, 10, 9]
    reports, streams = run(lm, prompts, max_tokens, submit_at=[0, 2, 2, 6, 6], max_active=4,
                           kv_token_budget=112, kv_policy="on_demand", max_num_tokens=24, step_policy="chunked",
                           prefix_caching=True)
    assert streams == solo(lm, prompts, max_tokens)
    assert any(r.preempted for r in reports) and any(n for r in reports for n in r.cached_tokens)


def _plan_rows(monkeypatch):
    rows = []
    real = Scheduler.schedule

    def schedule(self):
        plan = real(self)
        rows.append((plan.prefill_tokens, len(plan.decode)))
        return plan
    monkeypatch.setattr(Scheduler, "schedule", schedule)
    return rows


def test_simulator_prices_the_steps_the_real_path_runs(lm, monkeypatch):
    shared = [64, 64, 0, 64]
    plens, max_tokens = [80, 70, 40, 90], [4, 6, 5, 3]
    rows = _plan_rows(monkeypatch)
    run(lm, [prompt(n, i + 1, shared=s) for i, (n, s) in enumerate(zip(plens, shared))], max_tokens,
        max_active=2, max_num_tokens=32, step_policy="chunked", prefix_caching=True)
    real_rows, rows[:] = list(rows), []
    res = simulate_continuous(np.zeros(4), plens, max_tokens, TokenCost(1, 10, 1), max_active=2,
                              max_num_tokens=32, step_policy="chunked", shared_prefix_tokens=shared,
                              prefix_caching=True, block_size=16, warmup=0.0)
    assert rows == real_rows
    assert list(zip(res.batches["prefill_tokens"].tolist(), res.batches["decode_seqs"].tolist())) == real_rows
    # request 1 starts in the step that computes 0's tokens 32..63: it shares the blocks 0 fills in it
    assert res.extra["cached_tokens"].tolist() == [0, 64, 0, 64]
    assert res.summary()["prefix_hit_tokens"] == 128
    eta = res.batches["useful_tokens"].sum() / res.batches["executed_tokens"].sum()
    assert eta == 1
    # the hits are priced: 128 prompt tokens fewer to prefill
    plain = simulate_continuous(np.zeros(4), plens, max_tokens, TokenCost(1, 10, 1), max_active=2,
                                max_num_tokens=32, step_policy="chunked", warmup=0.0)
    assert plain.batches["prefill_tokens"].sum() - res.batches["prefill_tokens"].sum() == 128
    with pytest.raises(ValueError, match="shared_prefix_tokens needs prefix_caching"):
        simulate_continuous([0.0], [40], [3], TokenCost(1, 10, 1), max_active=2, shared_prefix_tokens=[32])


def test_simulator_preempts_where_the_real_path_does(lm, monkeypatch):
    plens, max_tokens = [12, 20, 9, 15, 11], [20, 14, 25, 10, 18]
    rows = _plan_rows(monkeypatch)
    reports, _ = run(lm, [prompt(n, i) for i, n in enumerate(plens)], max_tokens,
                     max_active=4, kv_token_budget=96, kv_policy="on_demand")
    real_rows, rows[:] = list(rows), []
    res = simulate_continuous(np.zeros(5), plens, max_tokens, TokenCost(1, 10, 1), max_active=4,
                              kv_token_budget=96, kv_policy="on_demand", warmup=0.0)
    assert rows == real_rows and sum(len(r.preempted) for r in reports) == res.summary()["preemptions"] > 0
    assert sum(r.recomputed_tokens for r in reports) == res.summary()["recomputed_tokens"] > 0


def test_bad_knob_values_are_one_line_errors(lm):
    with pytest.raises(ValueError, match="kv_policy"):
        ContinuousBatcher(lm, kv_policy="evict")
    with pytest.raises(ValueError, match="needs max_num_tokens"):
        ContinuousBatcher(lm, step_policy="chunked")
    with pytest.raises(ValueError, match="block_size"):
        ContinuousBatcher(lm, block_size=0)


def test_simulated_prefix_caching_cuts_ttft_and_blocks_of_a_shared_prefix():
    arrivals, n = np.arange(20) * 1e5, 20   # far apart: each request finds the engine idle
    kw = dict(max_active=4, warmup=0.0)
    cost = TokenCost(prefill_per_token=200, decode_base=5000, decode_per_seq=100)
    plain = simulate_continuous(arrivals, [300] * n, [4] * n, cost, **kw)
    cached = simulate_continuous(arrivals, [300] * n, [4] * n, cost, shared_prefix_tokens=[256] * n,
                                 prefix_caching=True, **kw)
    ttft = lambda r: np.median(r.records["first_token"] - r.records["arrival"])  # noqa: E731
    assert ttft(plain) >= 2 * ttft(cached)
    assert cached.extra["cached_tokens"].tolist() == [0] + [256] * (n - 1)
    together = simulate_continuous(np.zeros(8), [336] * 8, [4] * 8, cost, shared_prefix_tokens=[320] * 8,
                                   prefix_caching=True, **kw)
    alone = simulate_continuous(np.zeros(8), [336] * 8, [4] * 8, cost, **kw)
    assert alone.extra["peak_kv_blocks"] >= 4 * together.extra["peak_kv_blocks"] / 2  # max_active 4: 2 waves
