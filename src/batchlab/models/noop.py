"""`noop`: returns its input (INPUT0 -> OUTPUT0), for measuring client and server overhead."""

from __future__ import annotations

from batchlab.models.triton_io import require, serve_batch


class TritonPythonModel:
    """Triton entry point of `noop` (does not load the LM)."""

    def initialize(self, args: dict) -> None:
        self.model_name = args.get("model_name", "noop")

    def execute(self, requests: list) -> list:
        return serve_batch(requests, lambda r: {"OUTPUT0": require(r, "INPUT0")}, lambda batch: batch, "noop")
