"""`decode`: one stateless decode step per row over a fixed context prefilled at load into one shared
cache (TOKEN -> greedy NEXT_TOKEN, BATCH_SIZE): the weight-bound regime, t(B) = a + b·B with a large a.
Parameters `d_model`/`d_ff` widen the LM so its weights outgrow the CPU caches.
"""

from __future__ import annotations

import numpy as np

from batchlab.lm import BOS_ID
from batchlab.models.base import LMModelBase
from batchlab.models.triton_io import int_param, serve_token_rows

CONTEXT_SEED = 20


class TritonPythonModel(LMModelBase):
    """Triton entry point for `decode`."""

    def initialize(self, args: dict) -> None:
        super().initialize(args)
        if self.input_dims("TOKEN") != [1]:
            raise ValueError(f"TOKEN dims must be [1], got {self.input_dims('TOKEN')}")
        self.context_len = int_param(self.params, "context_tokens", 32, 1, self.max_seq_len - 1)
        rng = np.random.default_rng(CONTEXT_SEED)
        self.context = np.concatenate([[BOS_ID], rng.integers(4, self.vocab_size, self.context_len - 1)])
        _, self.prefix = self.lm.prefill(self.context, self.lm.new_cache(self.context_len))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Greedy next token for each row's token after the fixed context (any number of rows)."""
        return np.argmax(self.lm.decode_shared(self.prefix, tokens), axis=1).astype(np.int32)

    def execute(self, requests: list) -> list:
        return serve_token_rows(requests, "TOKEN", self.vocab_size, 1, lambda t: self.step(t[:, 0])[:, None],
                                "NEXT_TOKEN", "decode")
