"""Service-time presets several chapters' simulations share: `EMBED_LIKE` (t(B) of the CPU
`embed` model) and `LLM_COST` (per-token cost of an 8B-class model on an H100-class GPU).
"""

from __future__ import annotations

from batchlab.sim.service import Affine, TokenCost

#: t(B) = 4000 + 1300·B µs: a chosen preset in round numbers with the shape of the course's CPU `embed`
#: model (an affine t(B)), not a measurement; chapter 09 measures the real one on the learner's machine.
EMBED_LIKE = Affine(4000.0, 1300.0)

#: One forward pass of an 8B-class model on an H100-class GPU, µs (roofline orders of magnitude:
#: 16 GB of weights at ~2.7 TB/s ≈ 6 ms; 16 GFLOP/token at ~500 TFLOP/s ≈ 30 µs; 128 KiB KV/token).
LLM_COST = TokenCost(prefill_per_token=30.0, decode_base=6000.0, decode_per_seq=60.0, context_per_token=0.05)
