"""Speculative decoding on the real LM: the drafts (the bigram prior, vLLM's ngram prompt lookup), the
multi-position step, the `ContinuousBatcher` that verifies drafts in its steps, and `lm_stream` with
``speculative_method`` (in process and on the real server). The one claim that matters: with
speculation on, every request's tokens equal plain greedy decoding's, token for token."""

from __future__ import annotations

import collections
import functools
import re
from pathlib import Path

import numpy as np
import pytest

from batchlab import config_pbtxt as cfg
from batchlab.lm import ContinuousBatcher, Sequence, ToyLM, encode, generate
from batchlab.lm.speculative import BigramDraft, NgramDraft, make_draft
from batchlab.lm.vocab import ARTICLE
from batchlab.models.lm_stream import TritonPythonModel

import fake_pb  # tests/fake_pb.py
from test_lm_stream_knobs import staged


@pytest.fixture(scope="module")
def lm() -> ToyLM:
    return ToyLM.default()


def prompts(n: int) -> list[np.ndarray]:
    """n prompts of 6-40 characters of the article."""
    return [encode(ARTICLE[300 + 53 * i:306 + 53 * i + (i * 11) % 35]) for i in range(n)]


# --- the drafts --------------------------------------------------------------------------------------

def test_the_bigram_draft_follows_the_priors_most_likely_chain(lm):
    draft = BigramDraft(lm)
    got = draft.propose([1, 40, 50], 4)
    chain, t = [], 50
    for _ in range(4):
        t = int(np.argmax(lm.prior[t]))
        chain.append(t)
    assert got == chain and draft.propose([7], 0) == []


@pytest.mark.parametrize("tokens, k, expected", [
    ([1, 2, 3, 4, 2, 3], 4, [4, 2, 3]),            # vLLM's example: [2, 3] matched, three tokens follow it
    ([1, 2, 3, 9, 2, 3, 5, 2, 3], 2, [9, 2]),      # the earliest occurrence of the longest match
    ([7, 8, 9, 1, 8, 9, 2, 7, 8, 9], 3, [1, 8, 9]),  # the 3-gram [7, 8, 9] beats the later 2-gram [8, 9]
    ([1, 2, 3, 4, 5], 3, []),                       # nothing repeats: no draft
    ([5, 5, 5], 2, [5]),                            # an overlapping match
])
def test_the_ngram_draft_looks_the_suffix_up_in_the_context(tokens, k, expected):
    assert NgramDraft(2, 3).propose(tokens, k) == expected


def test_the_bigram_prior_finishes_what_the_lookup_leaves(lm):
    draft = make_draft("ngram_bigram", lm, 2, 3)
    assert draft.propose([1, 2, 3, 4, 2, 3], 4) == [4, 2, 3] + BigramDraft(lm).propose([3], 1)
    assert draft.propose([1, 2, 3, 4, 5], 2) == BigramDraft(lm).propose([5], 2)
    assert draft.propose([1, 2, 3, 4, 2, 3], 2) == [4, 2]


def test_bad_draft_settings_are_refused(lm):
    with pytest.raises(ValueError, match="prompt_lookup_min 4 is larger than prompt_lookup_max 2"):
        NgramDraft(4, 2)
    with pytest.raises(ValueError, match="speculative method must be one of"):
        make_draft("eagle", lm)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        ContinuousBatcher(lm, draft="bigram", num_speculative_tokens=0)


# --- the multi-position step -------------------------------------------------------------------------

def test_every_position_can_be_asked_per_chunk(lm):
    def fresh():
        caches = [lm.new_cache(64) for _ in range(3)]
        lm.forward(caches, [np.arange(4, 10), np.arange(4, 8), np.arange(6, 16)])
        return caches
    chunks = [np.array([11, 12, 13]), np.array([14]), np.array([15, 16])]
    every = lm.forward(fresh(), chunks, every_position=True)
    some = lm.forward(fresh(), chunks, every_position=[True, False, False])
    assert np.array_equal(some, every[[0, 1, 2, 3, 5]])
    with pytest.raises(ValueError, match="every_position names 2 chunks, the step has 3"):
        lm.forward(fresh(), chunks, every_position=[True, False])


# --- the batcher: the output is plain greedy decoding's ----------------------------------------------

def run(lm, jobs, **kwargs):
    """Step a batcher over `jobs` (Sequence kwargs each) to the end: the sequences, their requests and per
    step the (drafted, emitted) of every sequence that had a draft."""
    batcher = ContinuousBatcher(lm, **kwargs)
    seqs = [Sequence(lm, seq_id=i, **job) for i, job in enumerate(jobs)]
    requests = [batcher.submit(s) for s in seqs]
    steps = []
    while batcher.has_work:
        report = batcher.step()
        counts = collections.Counter(id(s) for s, _ in report.emitted)
        steps.append([(d, counts[sid]) for sid, d in report.drafted.items()])
    return seqs, requests, steps


SETTINGS = {
    "reserve": {},
    "on demand, preempting": {"kv_policy": "on_demand", "kv_token_budget": 192, "block_size": 16},
    "chunked, prefix cached": {"step_policy": "chunked", "max_num_tokens": 12, "prefix_caching": True,
                               "kv_policy": "on_demand", "block_size": 4},
}


JOBS = [{"prompt": p, "max_tokens": 24 + 5 * i, "ignore_eos": i % 2 == 0} for i, p in enumerate(prompts(8))]
JOBS[3].update(temperature=0.8, seed=3)   # sampled: never drafted, still its own tokens


@functools.lru_cache(maxsize=None)
def solo(i: int) -> list[int]:
    """Job i generated alone, one token a step: the reference."""
    return generate(ToyLM.default(), **JOBS[i])


@pytest.mark.parametrize("draft, concurrency, setting",   # one sequence at a time once; the drafts in every setting
                         [("bigram", 1, "reserve")] + [(d, 8, s) for d in ("bigram", "ngram", "ngram_bigram")
                                                       for s in sorted(SETTINGS)])
def test_speculation_keeps_every_token_of_greedy_decoding(lm, setting, draft, concurrency):
    kwargs = dict(SETTINGS[setting], max_active=concurrency)
    seqs, requests, steps = run(lm, JOBS, draft=draft, num_speculative_tokens=3, **kwargs)
    for i, seq in enumerate(seqs):
        assert seq.tokens == solo(i), f"request {i} differs from plain decoding"
    drafted = sum(r.drafted for r in requests)
    accepted = sum(r.accepted for r in requests)
    assert 0 < accepted < drafted and requests[3].drafted == 0
    assert all(1 <= n <= d + 1 for step in steps for d, n in step)
    assert sum(d for step in steps for d, _ in step) == drafted
    if setting == "on demand, preempting" and concurrency == 8:
        assert sum(r.preemptions for r in requests) > 0


@pytest.mark.parametrize("answer, message", [
    ((9, 1), "returned (9, 1) for 3 draft tokens"), ((0, -1), "returned (0, -1)"),
    (None, "must return (accepted, next_token)"), ((1.5, 2), "must return (accepted, next_token)")])
def test_a_broken_acceptance_rule_is_refused_by_name(lm, answer, message):
    batcher = ContinuousBatcher(lm, draft="ngram_bigram", num_speculative_tokens=3)
    batcher.accept = lambda draft_tokens, target_argmax: answer
    batcher.submit(Sequence(lm, prompts(1)[0], 12, ignore_eos=True))
    with pytest.raises(ValueError, match=re.escape(message)):
        while batcher.has_work:
            batcher.step()


def test_speculation_takes_fewer_steps_and_off_is_todays_batcher(lm):
    jobs = [{"prompt": p, "max_tokens": 40, "ignore_eos": True} for p in prompts(2)]
    _, off_requests, off_steps = run(lm, jobs, max_active=1)
    seqs, requests, steps = run(lm, jobs, max_active=1, draft="bigram", num_speculative_tokens=3)
    assert len(steps) < len(off_steps) and all(s == [] for s in off_steps)
    assert all(r.drafted == 0 == r.accepted for r in off_requests)
    # per step: the accepted draft tokens plus the target's own, never more than k + 1
    assert sum(n for step in steps for _, n in step) == sum(r.accepted for r in requests) + sum(
        len(step) for step in steps)
    assert max(d for step in steps for d, _ in step) == 3


# --- lm_stream ---------------------------------------------------------------------------------------

SPEC = {"speculative_method": "ngram", "num_speculative_tokens": "3"}


def load(tmp_path: Path, params: dict[str, str]) -> TritonPythonModel:
    model = TritonPythonModel()
    model.initialize(fake_pb.init_args(staged(tmp_path, "lm_stream_spec", params)))
    return model


@pytest.mark.parametrize("params, message", [
    ({"speculative_method": "eagle"}, "speculative_method='eagle' is not one of off, bigram, ngram, ngram_bigram"),
    ({"speculative_method": "bigram", "num_speculative_tokens": "0"}, r"num_speculative_tokens=0 is outside"),
    ({"speculative_method": "ngram", "prompt_lookup_min": "5"}, "prompt_lookup_min 5 is larger than"),
])
def test_a_bad_speculation_knob_fails_the_load_with_one_line(tmp_path, params, message):
    with pytest.raises(ValueError, match=message):
        load(tmp_path, params)


def test_the_default_config_does_not_speculate():
    model = TritonPythonModel()
    model.initialize(fake_pb.init_args(cfg.MODEL_REPOSITORY / "lm_stream"))
    assert model.batcher.draft is None
    model.finalize()


@pytest.mark.parametrize("params", [{}, SPEC, {"speculative_method": "ngram_bigram", "num_speculative_tokens": "4"}])
def test_lm_stream_streams_greedy_tokens_and_reports_the_drafts(tmp_path, lm, params):
    with fake_pb.installed():
        model = load(tmp_path, params)
        jobs = [(p, 20 + 3 * i) for i, p in enumerate(prompts(5))]
        reqs = [fake_pb.Request({"PROMPT": np.asarray(p, np.int32), "MAX_TOKENS": np.array([m], np.int32),
                                 "IGNORE_EOS": np.array([True])}) for p, m in jobs]
        model.execute(reqs)
        for r, (p, m) in zip(reqs, jobs):
            assert r.sender.wait_final(60)
            out = r.sender.responses()
            assert [x.output("TOKEN").item() for x in out] == generate(lm, p, m, ignore_eos=True)
            assert [x.output("INDEX").item() for x in out] == list(range(m))
            if not params:
                assert all("DRAFTED" not in x._outputs and "DRAFTED_TOKENS" not in x._outputs for x in out)
                continue
            _check_draft_figures(out, m)
        model.finalize()


def _check_draft_figures(out, m):
    """Tokens of one step share T_NS; a step's tokens are its accepted drafts + 1; the totals add up."""
    steps = collections.defaultdict(list)
    for x in out:
        steps[x.output("T_NS").item()].append(x.output("DRAFTED").item())
    drafted = [d[0] for d in steps.values()]
    assert all(len(set(d)) == 1 and 1 <= len(d) <= d[0] + 1 for d in steps.values())
    final = out[-1]
    assert final.output("DRAFTED_TOKENS").item() == sum(drafted)
    assert final.output("ACCEPTED_TOKENS").item() == m - len(steps)
    assert all("DRAFTED_TOKENS" not in x._outputs for x in out[:-1])
    assert final.output("ACCEPTED_TOKENS").item() > 0


@pytest.mark.server
@pytest.mark.parametrize("concurrency", [1, 8])
def test_the_server_streams_greedy_tokens_with_speculation(tmp_path, start_triton, lm, concurrency):
    from test_models_server import stream_generate

    staged(tmp_path, "lm_spec_ngram", SPEC)
    staged(tmp_path, "lm_spec_ngram_bigram", {"speculative_method": "ngram_bigram", "num_speculative_tokens": "3"})
    server = start_triton(repo=tmp_path)
    jobs = [(p, 24 + 4 * i) for i, p in enumerate(prompts(8))]
    for model in ("lm_spec_ngram", "lm_spec_ngram_bigram"):
        batches = [jobs] if concurrency == 8 else [[job] for job in jobs]   # all at once, or one at a time
        got = {}
        for b, batch in enumerate(batches):
            for k, items in stream_generate(server, model, batch, first_id=0).items():
                got[b * len(batch) + int(k)] = [i for i in items if "TOKEN" in i]
        for k, (p, m) in enumerate(jobs):
            assert [i["TOKEN"] for i in got[k]] == generate(lm, p, m, ignore_eos=True), (model, k)
            assert [i["INDEX"] for i in got[k]] == list(range(m))
        if concurrency == 8:
            assert max(i["ACTIVE"] for items in got.values() for i in items) > 1
