"""The toy LM: vocabulary, KV accounting, batch invariance, generation paths."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.lm import (BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, LMConfig, Sequence, ToyLM, decode,
                         encode, generate, generate_static_batch, kv_report, sample,
                         step)
from batchlab.lm.vocab import ARTICLE, CHARS, bigram_log_prior
from batchlab.theory.kv import MODEL_SHAPES, kv_bytes_per_token


@pytest.fixture(scope="module")
def lm() -> ToyLM:
    return ToyLM.default()


def article_prompts(n: int, seed: int, lo: int = 2, hi: int = 40) -> list[np.ndarray]:
    """Prompts cut from the article at random places, random lengths."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = int(rng.integers(0, len(ARTICLE) - hi))
        out.append(encode(ARTICLE[start:start + int(rng.integers(lo, hi))]))
    return out


# --------------------------------------------------------------------------- vocabulary

def test_vocab_is_article_characters_plus_specials():
    assert VOCAB_SIZE == 4 + len(set(ARTICLE))
    assert set(CHARS) == set(ARTICLE)
    ids = encode("一口锅 dynamic")
    assert ids[0] == BOS_ID and ids.dtype == np.int32
    assert decode(ids) == "一口锅 dynamic"


def test_unknown_characters_map_to_unk_and_bad_ids_raise():
    ids = encode("锅😀", bos=False)
    assert decode(ids) == "锅\ufffd"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode([VOCAB_SIZE])
    with pytest.raises(ValueError, match="takes a str"):
        encode(b"bytes")


def test_prior_never_generates_pad_or_bos():
    prior = bigram_log_prior(0.01)
    assert np.isneginf(prior[:, PAD_ID]).all() and np.isneginf(prior[:, BOS_ID]).all()
    # rows are log-probabilities
    np.testing.assert_allclose(np.exp(prior.astype(np.float64)).sum(axis=1), 1.0, rtol=1e-5)
    # "批" is followed by "处" more than by anything else in the article
    pi = encode("批", bos=False)[0]
    assert decode([int(np.argmax(prior[pi]))]) == "处"


# --------------------------------------------------------------------------- config and KV

def test_config_rejects_inexact_or_inconsistent_shapes():
    with pytest.raises(ValueError, match="2\\*\\*24"):
        LMConfig(d_ff=8192)
    with pytest.raises(ValueError, match="multiple of n_heads"):
        LMConfig(d_model=250)
    with pytest.raises(ValueError, match="n_kv_heads"):
        LMConfig(n_kv_heads=3)
    with pytest.raises(ValueError, match="positive int"):
        LMConfig(n_layers=0)


def test_kv_bytes_formula_and_reference_models():
    assert kv_bytes_per_token(4, 4, 64, 4) == 8192
    assert MODEL_SHAPES["Llama-2-7B"].bytes_per_token == 524_288
    assert MODEL_SHAPES["Llama-3-8B"].bytes_per_token == 131_072
    rows = kv_report(LMConfig())
    assert [r["bytes_per_token"] for r in rows] == [8192, 524_288, 131_072]
    gqa = kv_report(LMConfig(n_kv_heads=1))[0]
    assert gqa["bytes_per_token"] == 2048
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv_bytes_per_token(4, 0, 64, 4)


def test_cache_grows_by_blocks_and_accounts_bytes(lm):
    _, cache = lm.prefill(encode("动态批处理"))
    assert cache.length == 6
    assert cache.used_bytes == 6 * 8192
    assert cache.allocated_bytes == cache.capacity * 8192 and cache.capacity % 16 == 0
    for t in range(30):
        lm.decode_step([cache], [10 + t])
    assert cache.length == 36 and cache.capacity >= 36
    assert cache.allocated_bytes >= cache.used_bytes


def test_forward_rejects_bad_chunks_without_touching_caches(lm):
    _, cache = lm.prefill(encode("锅"))
    before = cache.length
    with pytest.raises(ValueError, match="vocabulary"):
        lm.forward([cache], [np.array([VOCAB_SIZE])])
    with pytest.raises(ValueError, match="max_seq_len"):
        lm.forward([cache], [np.full(lm.config.max_seq_len, 5)])
    with pytest.raises(ValueError, match="non-empty"):
        lm.forward([cache], [np.array([], np.int32)])
    with pytest.raises(ValueError, match="twice"):
        lm.forward([cache, cache], [np.array([5]), np.array([6])])
    assert cache.length == before


def test_weights_are_deterministic_from_the_seed():
    a, b = ToyLM(LMConfig(seed=3)), ToyLM(LMConfig(seed=3))
    c = ToyLM(LMConfig(seed=4))
    ids = encode("拼锅")
    la, lb, lc = a.prefill(ids)[0], b.prefill(ids)[0], c.prefill(ids)[0]
    assert np.array_equal(la, lb)
    assert not np.array_equal(la, lc)


# --------------------------------------------------------------------------- batch invariance

@pytest.mark.parametrize("batch", [1, 2, 3, 5, 8, *(pytest.param(b, marks=pytest.mark.slow) for b in (16, 33, 64))])
def test_decode_logits_are_bitwise_identical_alone_and_in_a_batch(lm, batch):
    prompts = article_prompts(batch, seed=batch)
    steps = 6
    # alone
    solo = []
    for p in prompts:
        logits, cache = lm.prefill(p)
        rows = [logits]
        for _ in range(steps):
            logits = lm.decode_step([cache], [int(np.argmax(logits))])[0]
            rows.append(logits)
        solo.append(rows)
    # together (ragged prefill in one pass, then batched decode)
    caches = [lm.new_cache() for _ in prompts]
    logits = lm.forward(caches, prompts)
    for s in range(steps + 1):
        for i in range(batch):
            assert np.array_equal(logits[i], solo[i][s]), (i, s)
        if s < steps:
            logits = lm.decode_step(caches, np.argmax(logits, axis=1))


def test_mixed_prefill_and_decode_step_is_batch_invariant(lm):
    a, b, c = article_prompts(3, seed=11)
    la, ca = lm.prefill(a)
    ref_next = lm.decode_step([ca], [int(np.argmax(la))])[0]
    ref_c = lm.prefill(c)[0]
    # a decodes while b and c are prefilled in the same execution
    la2, ca2 = lm.prefill(a)
    cb, cc = lm.new_cache(), lm.new_cache()
    out = lm.forward([cb, ca2, cc], [b, np.array([int(np.argmax(la2))]), c])
    assert np.array_equal(out[1], ref_next)
    assert np.array_equal(out[2], ref_c)


# --------------------------------------------------------------------------- the paged KV pool

def _paged(lm, pool, blocks):
    from batchlab.batching import BlockTable
    from batchlab.lm import PagedKV
    return PagedKV(pool, BlockTable(blocks=list(blocks)))


def test_attention_through_the_block_table_gives_the_contiguous_logits(lm):
    """Three sequences whose KV lives in scattered, interleaved blocks of one pool get bit-identical
    logits to contiguous caches, through a prefill, a chunk and decodes in one batch."""
    from batchlab.lm import KVPool
    pool = KVPool(lm.config, num_blocks=24, block_size=16)
    prompts = article_prompts(3, seed=21, lo=20, hi=38)
    tables = [[7, 2, 19, 4], [0, 23, 11, 5], [13, 1, 8, 17]]    # not in order, not adjacent
    paged = [_paged(lm, pool, t) for t in tables]
    flat = [lm.new_cache() for _ in prompts]
    chunks = [p[:17] for p in prompts]                            # first chunks cross a block edge
    assert np.array_equal(lm.forward(paged, chunks), lm.forward(flat, chunks))
    rest = [p[17:] for p in prompts]
    out_p, out_f = lm.forward(paged, rest), lm.forward(flat, rest)
    assert np.array_equal(out_p, out_f)
    for _ in range(12):
        tokens = np.argmax(out_f, axis=1)
        out_p, out_f = lm.decode_step(paged, tokens), lm.decode_step(flat, tokens)
        assert np.array_equal(out_p, out_f)
    for cp, cf in zip(paged, flat):
        assert cp.length == cf.length and np.array_equal(cp.read(2, cp.length)[0], cf.read(2, cf.length)[0])
    # the pool is the storage: another sequence's blocks were not written
    untouched = sorted(set(range(24)) - {b for t in tables for b in t})
    assert not pool.k[:, :, untouched].any()


def test_a_block_table_too_short_for_the_step_is_one_error(lm):
    from batchlab.lm import KVPool
    cache = _paged(lm, KVPool(lm.config, num_blocks=4, block_size=16), [3])
    with pytest.raises(ValueError, match="allocate its blocks before the step"):
        lm.forward([cache], [np.arange(4, 21)])                     # 17 tokens, one block of 16
    assert cache.length == 0


def test_sequences_sharing_prefix_blocks_in_one_step_read_them_written(lm):
    """B points at A's first block (a prefix hit in the step A computes it): B's logits equal B alone."""
    from batchlab.lm import KVPool
    pool = KVPool(lm.config, num_blocks=8, block_size=16)
    a = np.concatenate([[BOS_ID], np.arange(10, 30)])             # 21 tokens
    b = np.concatenate([a[:16], np.arange(50, 56)])               # the same first block, then its own
    ca, cb = _paged(lm, pool, [5, 2]), _paged(lm, pool, [5, 6])
    cb.length = 16                                                 # its first block is A's: not computed
    out = lm.forward([cb, ca], [b[16:], a])                        # B comes first in the batch
    alone = lm.prefill(b)[0]
    assert np.array_equal(out[0], alone) and np.array_equal(out[1], lm.prefill(a)[0])


@pytest.mark.parametrize("seed", range(6))
def test_every_position_logits_are_the_logits_after_each_position(lm, seed):
    """`every_position` gives the logits after each position of a chunk (what verifying speculative
    tokens needs): the last row is the usual output, and every row is bit-identical to feeding the
    tokens one at a time (chunk invariance: a row's masked keys do not change its softmax)."""
    p = article_prompts(1, seed=5 + seed, lo=10, hi=40)[0]
    all_rows = lm.forward([lm.new_cache()], [p], every_position=True)
    assert np.array_equal(all_rows[-1], lm.prefill(p)[0])
    cache = lm.new_cache()
    one = np.stack([lm.forward([cache], [p[i:i + 1]])[0] for i in range(p.size)])
    assert all_rows.shape == (p.size, VOCAB_SIZE) and np.array_equal(all_rows, one)


@pytest.mark.parametrize("rows", [1, 2, 7, 32])
def test_embed_rows_do_not_depend_on_the_batch(lm, rows):
    rng = np.random.default_rng(rows)
    tokens = np.zeros((rows, 16), np.int32)
    for r in range(rows):
        n = int(rng.integers(1, 17))
        tokens[r, :n] = rng.integers(4, VOCAB_SIZE, n)
    together = lm.embed(tokens)
    for r in range(rows):
        assert np.array_equal(lm.embed(tokens[r:r + 1])[0], together[r])
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)


def test_embed_ignores_trailing_padding_and_rejects_leading_padding(lm):
    ids = encode("拼锅机制")
    short = np.zeros((1, 8), np.int32)
    short[0, :ids.size] = ids
    long = np.zeros((1, 16), np.int32)
    long[0, :ids.size] = ids
    np.testing.assert_allclose(lm.embed(short), lm.embed(long), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="start with a real token"):
        lm.embed(np.array([[0, 5, 6]]))


# --------------------------------------------------------------------------- sampling

def test_sampling_is_seeded_and_greedy_at_zero_temperature(lm):
    logits, _ = lm.prefill(encode("动态"))
    draws = [sample(logits, 1.0, np.random.default_rng(5)) for _ in range(3)]
    assert len(set(draws)) == 1
    many = {sample(logits, 1.5, np.random.default_rng(s)) for s in range(40)}
    assert len(many) > 3
    assert sample(logits, 0.0, np.random.default_rng(0)) == int(np.argmax(logits))
    with pytest.raises(ValueError, match="temperature"):
        sample(logits, -1.0, np.random.default_rng(0))


# --------------------------------------------------------------------------- generation paths

@pytest.mark.slow
def test_generation_is_the_same_alone_in_static_and_in_mixed_batches(lm):
    prompts = article_prompts(12, seed=7)
    specs = [dict(max_tokens=int(5 + 3 * (i % 5)), temperature=0.0 if i % 3 else 0.9,
                  seed=i, ignore_eos=bool(i % 2)) for i in range(12)]
    solo = [generate(lm, p, **s) for p, s in zip(prompts, specs)]
    # static batch
    seqs = [Sequence(lm, p, **s) for p, s in zip(prompts, specs)]
    result = generate_static_batch(lm, seqs)
    assert result.tokens == solo
    assert result.steps == max(len(t) for t in solo)
    # staggered arrivals: a new sequence joins every step (continuous batching)
    seqs = [Sequence(lm, p, **s) for p, s in zip(prompts, specs)]
    live, pending = [], list(seqs)
    while live or pending:
        if pending:
            live.append(pending.pop(0))
        step(lm, live)
        live = [s for s in live if not s.done]
    assert [s.tokens for s in seqs] == solo


def test_sequence_stops_at_eos_unless_ignored(lm):
    ids = encode("一口锅")  # greedy generation ends with <eos> after a few tokens
    out = generate(lm, ids, 50)
    assert out[-1] == EOS_ID and len(out) < 50
    out = generate(lm, ids, 50, ignore_eos=True)
    assert len(out) == 50


@pytest.mark.parametrize("prompt,max_tokens,match", [
    (np.array([], np.int32), 5, "empty"),
    (np.array([[1, 2]]), 5, "1-D"),
    (np.array([1.0, 2.0]), 5, "integers"),
    (np.array([1, VOCAB_SIZE]), 5, "outside the vocabulary"),
    (np.array([1, 0, 5]), 5, "<pad>"),
    (np.array([1, 5]), 0, "max_tokens"),
    (np.array([1, 5]), 511, "max_seq_len"),
])
def test_sequence_validation_names_the_problem(lm, prompt, max_tokens, match):
    with pytest.raises(ValueError, match=match):
        Sequence(lm, prompt, max_tokens)


def test_request_input_builders_have_the_models_shapes():
    from batchlab.load.transport import triton_dtype
    from batchlab.models.requests import generate_inputs
    g = generate_inputs("拼锅", 8, temperature=0.5, seed=3, ignore_eos=True)
    assert {k: v.shape for k, v in g.items()} == {"PROMPT": (1, 3), "MAX_TOKENS": (1, 1),
                                                  "TEMPERATURE": (1, 1), "SEED": (1, 1),
                                                  "IGNORE_EOS": (1, 1)}
    assert [triton_dtype(v) for v in g.values()] == ["INT32", "INT32", "FP32", "INT64", "BOOL"]
    s = generate_inputs([1, 5, 6], 4, batched=False)
    assert s["PROMPT"].shape == (3,) and s["MAX_TOKENS"].shape == (1,)


@pytest.mark.slow
def test_logits_do_not_depend_on_blas_threads_or_context_growth(lm):
    from batchlab.lm import blas

    before = blas.get_num_threads()
    prompts = article_prompts(16, seed=21, lo=100, hi=300)
    results = []
    try:
        for threads in (1, 2):
            blas.set_num_threads(threads)
            caches = [lm.new_cache() for _ in prompts]
            logits = lm.forward(caches, prompts)
            rows = [logits]
            for _ in range(3):
                logits = lm.decode_step(caches, np.argmax(logits, axis=1))
                rows.append(logits)
            results.append(np.stack(rows))
    finally:
        if before:
            blas.set_num_threads(before)
    assert np.array_equal(results[0], results[1])


def test_decode_step_times_measures_each_batch_size(lm):
    from batchlab.lm import decode_step_times

    times = decode_step_times(lm, [1, 4], context=8, repeats=2)
    assert set(times) == {1, 4} and all(t > 0 for t in times.values())
    with pytest.raises(ValueError, match="batch sizes"):
        decode_step_times(lm, [0])
    with pytest.raises(ValueError, match="context"):
        decode_step_times(lm, [1], context=lm.config.max_seq_len)


@pytest.mark.parametrize("config", [LMConfig(), LMConfig(d_model=128, d_ff=512, n_kv_heads=2)])
def test_decode_shared_equals_decode_step_on_copies_and_leaves_prefix(config):
    model = ToyLM(config)
    rng = np.random.default_rng(3)
    context = np.concatenate([[BOS_ID], rng.integers(4, VOCAB_SIZE, 20)])
    _, prefix = model.prefill(context)
    k0 = prefix.k.copy()
    for b in (1, 2, 7, 33):
        toks = rng.integers(4, VOCAB_SIZE, b)
        copies = [model.prefill(context)[1] for _ in range(b)]
        assert np.array_equal(model.decode_shared(prefix, toks), model.decode_step(copies, toks))
    assert prefix.length == context.size and np.array_equal(prefix.k, k0)


def test_decode_shared_rejects_bad_tokens(lm):
    _, prefix = lm.prefill(np.array([BOS_ID, 5, 6]))
    for bad, msg in (([], "non-empty"), ([[4]], "1-D"), ([VOCAB_SIZE], "vocabulary"), ([1.5], "1-D")):
        with pytest.raises(ValueError, match=msg):
            lm.decode_shared(prefix, np.asarray(bad))
