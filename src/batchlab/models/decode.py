"""`decode`: a stateless decode-regime model, one toy-LM decode step per row over a fixed KV context.

Input TOKEN INT32 [1] (one token id per row), outputs NEXT_TOKEN INT32 [1] (greedy next token
after the fixed context followed by that token) and BATCH_SIZE INT32 [1] (rows in the execution).
Every row attends to the same fixed context of `context_tokens` tokens (parameter, default 32),
prefilled once at load time into one shared KV cache that a step reads but never changes
(`ToyLM.decode_shared`), so a request's answer depends on its token only (stateless: the dynamic
batcher may group any rows). One step reads all the weights once whatever the batch, like an
LLM's decode: t(B) = a + b·B with a large a and a small b, the regime where dynamic batching pays
most. With parameters `d_model`/`d_ff` the LM is wider than the course default (the shipped
config uses 512/2048: 52 MB of weights, more than the CPU caches hold, so every step streams them
from memory, as an LLM's decode streams its weights from HBM).
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
