"""`noop`: returns its input (INPUT0 -> OUTPUT0), for measuring client and server overhead."""

from __future__ import annotations

from batchlab.models.triton_io import InputError, error, ok, require


class TritonPythonModel:
    """Triton entry point of `noop` (does not load the LM)."""

    def initialize(self, args: dict) -> None:
        self.model_name = args.get("model_name", "noop")

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            try:
                responses.append(ok({"OUTPUT0": require(request, "INPUT0")}))
            except InputError as exc:
                responses.append(error(str(exc)))
        return responses
