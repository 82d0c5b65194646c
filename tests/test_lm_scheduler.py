"""Continuous batching scheduler and its admission policy (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.lm import (ContinuousBatcher, FCFSAdmission, SeqInfo, Sequence, ToyLM, encode,
                         generate)


@pytest.fixture(scope="module")
def lm() -> ToyLM:
    return ToyLM.default()


def info(prompt: int, max_tokens: int, generated: int = 0) -> SeqInfo:
    return SeqInfo(seq_id=None, prompt_tokens=prompt, max_tokens=max_tokens, generated=generated)


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
