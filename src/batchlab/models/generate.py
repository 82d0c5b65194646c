"""`generate`: request-level generation batched by the dynamic batcher (static batching): each
execution decodes its whole batch until the longest member is done (finished rows pad).
"""

from __future__ import annotations

import numpy as np

from batchlab.lm.generation import generate_static_batch
from batchlab.models.triton_io import InputError, error, ok, one_line
from batchlab.models._gen_inputs import generation_limits, read_sequences
from batchlab.models.base import LMModelBase
from batchlab.lm.vocab import PAD_ID


class TritonPythonModel(LMModelBase):
    """Triton entry point of `generate`."""

    def initialize(self, args: dict) -> None:
        super().initialize(args)
        self.max_prompt, self.max_tokens_limit = generation_limits(self.params, self.max_seq_len)

    def execute(self, requests: list) -> list:
        responses: list = [None] * len(requests)
        groups = []
        for i, request in enumerate(requests):
            try:
                groups.append((i, read_sequences(self.lm, request, True, self.max_prompt,
                                                 self.max_tokens_limit)))
            except InputError as exc:
                responses[i] = error(str(exc))
        if not groups:
            return responses
        seqs = [s for _, g in groups for s in g]
        try:
            result = generate_static_batch(self.lm, seqs)
        except Exception as exc:
            for i, _ in groups:
                responses[i] = error(f"generate failed: {one_line(exc)}")
            return responses
        b = len(seqs)
        k = 0
        for i, group in groups:
            toks = result.tokens[k:k + len(group)]
            k += len(group)
            width = max(len(t) for t in toks)
            out = np.full((len(group), width), PAD_ID, dtype=np.int32)
            for r, t in enumerate(toks):
                out[r, :len(t)] = t
            n = np.array([[len(t)] for t in toks], dtype=np.int32)
            responses[i] = ok({
                "TOKENS": out,
                "NUM_TOKENS": n,
                "BATCH_STEPS": np.full_like(n, result.steps),
                "PADDED_STEPS": result.steps - n,
                "BATCH_SIZE": np.full_like(n, b),
            })
        return responses
