"""`embed` (and embed_nobatch / embed_delay / embed_2inst / embed_queue): stateless prefill.

Input TOKENS INT32 [L] (L from the config; prompts padded at the end with <pad> = 0), output
EMBEDDING FP32 [d_model] (mean of the final hidden states over real tokens, L2-normalised) and
BATCH_SIZE INT32 [1] (rows in the execution that served this request). A request may carry
several rows; each bad request gets its own error response, the rest of the batch is served.
"""

from __future__ import annotations

from batchlab.models.triton_io import serve_token_rows
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
        return serve_token_rows(requests, "TOKENS", self.vocab_size, self.length, self.lm.embed, "EMBEDDING", "embed")
