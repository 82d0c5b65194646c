"""`embed` (and embed_nobatch / embed_delay / embed_2inst / embed_queue): stateless prefill.

Input TOKENS INT32 [L] (L from the config; prompts padded at the end with <pad> = 0), output
EMBEDDING FP32 [d_model] (mean of the final hidden states over real tokens, L2-normalised) and
BATCH_SIZE INT32 [1] (rows in the execution that served this request). A request may carry
several rows; each bad request gets its own error response, the rest of the batch is served.
"""

from __future__ import annotations

import numpy as np

from batchlab.models.triton_io import (InputError, batch_size_column, check_token_rows, error, ok,
                                   one_line, require)
from batchlab.models.base import LMModelBase


class TritonPythonModel(LMModelBase):
    """Triton entry point for the embed family."""

    def initialize(self, args: dict) -> None:
        super().initialize(args)
        dims = self.input_dims("TOKENS")
        if len(dims) != 1 or dims[0] < 1:
            raise ValueError(f"TOKENS dims must be one fixed length, got {dims}")
        self.length = dims[0]

    def execute(self, requests: list) -> list:
        responses: list = [None] * len(requests)
        batch: list[tuple[int, np.ndarray]] = []
        for i, request in enumerate(requests):
            try:
                tokens = check_token_rows(require(request, "TOKENS"), "TOKENS",
                                          self.vocab_size, self.length)
                batch.append((i, tokens))
            except InputError as exc:
                responses[i] = error(str(exc))
        if batch:
            rows = sum(t.shape[0] for _, t in batch)
            try:
                pooled = self.lm.embed(np.concatenate([t for _, t in batch]))
                start = 0
                for i, tokens in batch:
                    n = tokens.shape[0]
                    responses[i] = ok({"EMBEDDING": pooled[start:start + n],
                                       "BATCH_SIZE": batch_size_column(n, rows)})
                    start += n
            except Exception as exc:  # never let one bad batch kill the stub
                for i, _ in batch:
                    responses[i] = error(f"embed failed: {one_line(exc)}")
        return responses
