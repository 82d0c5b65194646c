"""`embed` (and embed_nobatch / embed_delay / embed_2inst / embed_queue): stateless prefill of padded
token rows to an EMBEDDING; a bad request gets its own error, the rest of the batch is served.
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
