"""Service-time presets that several chapters' experiments share (one definition each).

- `EMBED_LIKE`: the batch-level cost t(B) of the course's CPU `embed` model (chapters 06, 09, 10).
- `LLM_COST`: the per-token cost of an 8B-class model on one H100-class GPU (chapters 07, 09, 10).

Both are fixed, seeded assumptions for `batchlab.sim`; the chapters that run the live server
re-measure what they need.
"""

from __future__ import annotations

from batchlab.sim.service import Affine, TokenCost

__all__ = ["EMBED_LIKE", "LLM_COST"]

#: A batch-level model with the shape of the course's CPU `embed` model on a 2-core machine (one
#: run's `batch_stats`: ~5.4 ms at batch 1, ~14 ms at 8, ~26 ms at 16): t(B) = 4000 + 1300·B µs.
#: Chapter 09 re-measures it on the live server; the simulations use this fixed, seeded form.
EMBED_LIKE = Affine(4000.0, 1300.0)

#: One forward pass of a 8B-class model on one H100-class GPU, in µs (an assumption, order of
#: magnitude from the roofline: 16 GB of bf16 weights read per step at ~2.7 TB/s ≈ 6 ms; prefill
#: ≈ 16 GFLOP per token at ~500 TFLOP/s ≈ 30 µs; KV reads 128 KiB per context token ≈ 0.05 µs).
LLM_COST = TokenCost(prefill_per_token=30.0, decode_base=6000.0, decode_per_seq=60.0, context_per_token=0.05)
