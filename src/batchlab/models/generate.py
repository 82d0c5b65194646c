"""`generate`: request-level generation batched by the dynamic batcher (static batching): each
execution decodes its whole batch until the longest member is done (finished rows pad).
"""

from __future__ import annotations

import numpy as np

from batchlab.lm.generation import Sequence, generate_static_batch
from batchlab.models.triton_io import serve_batch
from batchlab.models._gen_inputs import generation_limits, read_sequences
from batchlab.models.base import LMModelBase
from batchlab.lm.vocab import PAD_ID


class TritonPythonModel(LMModelBase):
    """Triton entry point of `generate`."""

    def initialize(self, args: dict) -> None:
        super().initialize(args)
        self.max_prompt, self.max_tokens_limit = generation_limits(self.params, self.max_seq_len)

    def execute(self, requests: list) -> list:
        return serve_batch(requests, lambda r: read_sequences(self.lm, r, True, self.max_prompt, self.max_tokens_limit),
                           self.generate, "generate")

    def generate(self, groups: list[list[Sequence]]) -> list[dict[str, np.ndarray]]:
        """One static batch of every request's sequences; each request's outputs."""
        seqs = [s for group in groups for s in group]
        result = generate_static_batch(self.lm, seqs)
        rows = iter(result.tokens)
        outputs = []
        for group in groups:
            toks = [next(rows) for _ in group]
            out = np.full((len(toks), max(len(t) for t in toks)), PAD_ID, dtype=np.int32)
            for r, t in enumerate(toks):
                out[r, :len(t)] = t
            n = np.array([[len(t)] for t in toks], dtype=np.int32)
            outputs.append({"TOKENS": out, "NUM_TOKENS": n, "BATCH_STEPS": np.full_like(n, result.steps),
                            "PADDED_STEPS": result.steps - n, "BATCH_SIZE": np.full_like(n, len(seqs))})
        return outputs
