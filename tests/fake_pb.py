"""A stand-in for `triton_python_backend_utils`, to run the course's model classes in-process.

Only what the course models use: Tensor, InferenceResponse, TritonError, the request and
response-sender objects, and the flag constants. The tests use it to call
`TritonPythonModel.execute` directly (no server), e.g.::

    import fake_pb
    with fake_pb.installed():
        from batchlab.models.lm_step import TritonPythonModel
        model = TritonPythonModel()
        model.initialize(fake_pb.init_args("src/batchlab/model_repository/lm_step"))
        resp = model.execute([fake_pb.Request({"TOKENS": ids[None]}, correlation_id=7, start=True)])
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import types
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class TritonError:
    """An error carried by a response."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, \
        CANCELLED = range(8)

    def __init__(self, message: str, code: int = 0) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        """The error text."""
        return self._message

    def code(self) -> int:
        """The error code."""
        return self._code


class Tensor:
    """A named numpy tensor."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        """Tensor name."""
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The data."""
        return self._array


class InferenceResponse:
    """Output tensors or an error."""

    def __init__(self, output_tensors: list | None = None, error: TritonError | None = None
                 ) -> None:
        self._outputs = {t.name(): t for t in (output_tensors or [])}
        self._error = error

    def has_error(self) -> bool:
        """True for an error response."""
        return self._error is not None

    def error(self) -> TritonError | None:
        """The error, if any."""
        return self._error

    def output(self, name: str) -> np.ndarray:
        """Output tensor `name` as numpy (KeyError if absent)."""
        return self._outputs[name].as_numpy()

    def output_tensors(self) -> list:
        """All output tensors."""
        return list(self._outputs.values())


class ResponseSender:
    """Collects what a decoupled model sends; `cancel()` simulates a client cancelling."""

    def __init__(self) -> None:
        self.sent: list[tuple[InferenceResponse | None, int]] = []
        self._cancelled = False
        self._lock = threading.Condition()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Record a response (and flags); refuses anything after the final flag."""
        with self._lock:
            if self.sent and self.sent[-1][1] & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                raise RuntimeError("response sent after the final flag")
            self.sent.append((response, flags))
            self._lock.notify_all()

    def is_cancelled(self) -> bool:
        """True once `cancel()` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Simulate the client cancelling the request."""
        self._cancelled = True

    @property
    def finished(self) -> bool:
        """True once the final flag was sent."""
        return bool(self.sent) and bool(self.sent[-1][1] & TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def wait_final(self, timeout: float = 10.0) -> bool:
        """Block until the final flag arrives (or `timeout` s); return whether it did."""
        with self._lock:
            return self._lock.wait_for(lambda: self.finished, timeout)

    def responses(self) -> list[InferenceResponse]:
        """The non-empty responses sent so far."""
        return [r for r, _ in self.sent if r is not None]


class InferenceRequest:
    """A request with named inputs and sequence-batcher metadata."""

    def __init__(self, inputs: dict[str, Any], correlation_id: int = 0, start: bool = False,
                 end: bool = False, ready: bool | None = None, controls: bool = True) -> None:
        self._inputs = {k: np.asarray(v) for k, v in inputs.items()}
        self._corr = int(correlation_id)
        self._flags = (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if start else 0) | \
            (TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if end else 0)
        if controls and correlation_id:
            ready = True if ready is None else ready
            self._inputs.setdefault("START", np.array([[int(start)]], np.int32))
            self._inputs.setdefault("END", np.array([[int(end)]], np.int32))
            self._inputs.setdefault("READY", np.array([[int(ready)]], np.int32))
            self._inputs.setdefault("CORRID", np.array([[self._corr]], np.uint64))
        elif ready is not None:
            self._inputs["READY"] = np.array([[int(ready)]], np.int32)
        self.sender = ResponseSender()
        self.release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    def correlation_id(self) -> int:
        """The sequence id (0 when none)."""
        return self._corr

    def flags(self) -> int:
        """START / END flags."""
        return self._flags

    def is_cancelled(self) -> bool:
        """Whether the client cancelled."""
        return self.sender.is_cancelled()

    def get_response_sender(self) -> ResponseSender:
        """The decoupled response sender."""
        return self.sender

    def set_release_flags(self, flags: int) -> None:
        """Record the release flags (RESCHEDULE hands the request back to the batcher)."""
        self.release_flags = flags

    def input(self, name: str) -> Tensor | None:
        """Input `name` or None."""
        arr = self._inputs.get(name)
        return None if arr is None else Tensor(name, arr)

    def after_reschedule(self) -> "InferenceRequest":
        """What Triton hands back after RESCHEDULE: same inputs and sender, START cleared."""
        if "START" in self._inputs:
            self._inputs["START"] = np.array([[0]], np.int32)
        self._flags &= ~TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
        self.release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return self


Request = InferenceRequest


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    """Input `name` of `request`, or None."""
    return request.input(name)


def init_args(model_dir: str | Path, model_name: str | None = None) -> dict:
    """The `initialize(args)` dict for a model directory (its config.pbtxt parsed)."""
    model_dir = Path(model_dir)
    config = parse_pbtxt((model_dir / "config.pbtxt").read_text(encoding="utf-8"))
    name = model_name or config.get("name") or model_dir.name
    return {"model_config": json.dumps(config), "model_name": name,
            "model_instance_kind": "CPU", "model_instance_name": f"{name}_0",
            "model_instance_device_id": "0", "model_repository": str(model_dir.parent),
            "model_version": "1"}


def parse_pbtxt(text: str) -> dict:
    """A config.pbtxt as the JSON dict Triton hands to `initialize` (args["model_config"]).

    Parsed against Triton's own schema (`model_config.proto`, shipped with tritonclient), with
    proto field names and 64-bit integers as strings, as Triton's JSON has them.
    """
    message = text_format.Parse(text, model_config_pb2.ModelConfig())
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


@contextlib.contextmanager
def installed() -> Iterator[types.ModuleType]:
    """Make `import triton_python_backend_utils` return this module inside the block."""
    previous = sys.modules.get("triton_python_backend_utils")
    sys.modules["triton_python_backend_utils"] = sys.modules[__name__]
    try:
        yield sys.modules[__name__]
    finally:
        if previous is None:
            sys.modules.pop("triton_python_backend_utils", None)
        else:
            sys.modules["triton_python_backend_utils"] = previous
