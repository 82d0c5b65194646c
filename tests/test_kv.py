"""batchlab.theory.kv: KV bytes per token, the reference model shapes, capacity planning."""

from __future__ import annotations

import pytest

from batchlab.theory import kv


def test_kv_cache_references() -> None:
    for name, want in (("Llama-2-7B", 524_288), ("Llama-3-8B", 131_072)):
        s = kv.MODEL_SHAPES[name]
        assert kv.kv_bytes_per_token(s.n_layers, s.n_kv_heads, s.head_dim, s.bytes_per_element) == want
        assert s.bytes_per_token == want
    assert kv.max_concurrent_sequences(40 * 2**30, 524_288, 4096) == 20


def test_model_shapes_table() -> None:
    l2, l3 = kv.MODEL_SHAPES["Llama-2-7B"], kv.MODEL_SHAPES["Llama-3-8B"]
    assert (l2.params_b, l2.context_len, l3.params_b, l3.context_len) == (6.74, 4096, 8.03, 8192)
    assert l2.label == "Llama-2-7B (fp16)" and l3.label == "Llama-3-8B (fp16, GQA)"


def test_kv_bytes_rejects_non_positive_ints() -> None:
    assert kv.kv_bytes_per_token(4, 4, 64, 4) == 8192
    for bad in ((4, 0, 64, 4), (4, 4, 64.0, 4), (True, 4, 64, 4)):
        with pytest.raises(ValueError, match="positive int"):
            kv.kv_bytes_per_token(*bad)


def test_kv_bytes_for_reference_models():
    assert kv.kv_bytes_for("Llama-2-7B") == 524_288
    assert kv.kv_bytes_for("Llama-3-8B") == 131_072
    with pytest.raises(ValueError, match="unknown model"):
        kv.kv_bytes_for("GPT-9")


def test_plan_kv_arithmetic():
    p = kv.plan_kv(gpu_bytes=10_000, weight_bytes=2_000, bytes_per_token=10, tokens_per_sequence=50,
                  fraction=0.5, reserve_bytes=1_000)
    assert p.kv_budget_bytes == pytest.approx(3_500)
    assert p.kv_token_budget == 350
    assert p.max_sequences == 7          # 3500 // (10 * 50)
    assert p.bytes_per_sequence == 500
    with pytest.raises(ValueError, match="leave no memory"):
        kv.plan_kv(10, 20, 1, 1)
    with pytest.raises(ValueError, match="fraction"):
        kv.plan_kv(10, 1, 1, 1, fraction=1.5)


def test_kv_plan_table_monotone_and_gqa_gain():
    rows = kv.kv_plan_table(["Llama-2-7B", "Llama-3-8B"], "H100-SXM", [2048, 4096, 8192])
    for m in ("Llama-2-7B", "Llama-3-8B"):
        seqs = [r["max_sequences"] for r in rows if r["model"] == m]
        assert seqs == sorted(seqs, reverse=True) and seqs[0] > seqs[-1]
    by = {(r["model"], r["seq_len"]): r for r in rows}
    ratio = by[("Llama-3-8B", 4096)]["max_sequences"] / by[("Llama-2-7B", 4096)]["max_sequences"]
    assert 3.5 < ratio < 4.5  # GQA: a quarter of the KV per token, slightly larger weights
    with pytest.raises(ValueError, match="unknown gpu"):
        kv.kv_plan_table(["Llama-2-7B"], "Z80", [1])
