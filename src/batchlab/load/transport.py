"""How one request travels (unary gRPC or HTTP on asyncio; the gRPC stream is `streams`), filling in
its `RequestRecord`. A failed request is recorded, never raised. Open a transport inside the event
loop that will use it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import replace
from typing import Any, Mapping

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from batchlab.load.records import RequestRecord
from batchlab.load.workload import RequestSpec, SequenceSpec

now = time.perf_counter
_SEQ_IDS = itertools.count(1)  # shared by every transport of this process


def triton_dtype(arr: np.ndarray) -> str:
    """Triton's datatype name for a numpy array (object/bytes arrays are BYTES)."""
    name = "BYTES" if arr.dtype.kind in ("O", "S", "U") else np_to_triton_dtype(arr.dtype)
    if name is None:
        raise ValueError(f"numpy dtype {arr.dtype} has no Triton datatype")
    return name


def infer_inputs(module: Any, inputs: Mapping[str, np.ndarray], **kwargs: Any) -> list[Any]:
    """`module.InferInput`s (tritonclient grpc or http) holding ``inputs``; ``kwargs`` go to
    ``set_data_from_numpy``."""
    out = []
    for name, arr in inputs.items():
        inp = module.InferInput(name, list(arr.shape), triton_dtype(arr))
        inp.set_data_from_numpy(arr, **kwargs)
        out.append(inp)
    return out


def format_error(exc: BaseException) -> str:
    """One line naming what went wrong: Triton's ``[status] message``, or the exception type."""
    if isinstance(exc, InferenceServerException):
        status = exc.status()
        msg = exc.message() or str(exc)
        return f"[{status}] {msg}" if status else msg
    if isinstance(exc, asyncio.TimeoutError):
        return "client timeout: no answer within the request timeout"
    return f"{type(exc).__name__}: {exc}"


class Transport:
    """Base class: runs a `RequestSpec` or `SequenceSpec` and fills in its record."""

    def __init__(self, url: str, model: str, request_timeout_s: float = 60.0) -> None:
        if request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, not {request_timeout_s}")
        self.url = url
        self.model = model
        self.request_timeout_s = request_timeout_s
        self._ids = itertools.count(1)
        # assigned sequence ids: far from any id a factory would pick, different per process
        self.sequence_id_base = (1 << 40) | ((os.getpid() & 0xFFFF) << 24)
        self.saw_sequences = False  # a SequenceSpec ran: its record spans several requests

    async def close(self) -> None:
        """Release connections (the asyncio tritonclient ``client`` of a unary transport)."""
        if getattr(self, "client", None) is not None:
            await self.client.close()
            self.client = None

    def new_sequence_id(self) -> int:
        """A correlation id not used before by this transport."""
        return self.sequence_id_base + next(_SEQ_IDS) % (1 << 24)

    async def execute(self, spec: RequestSpec | SequenceSpec, rec: RequestRecord) -> None:
        """Send `spec` and record what happened in `rec` (never raises for a failed request)."""
        if isinstance(spec, SequenceSpec):
            self.saw_sequences = True
            await self._sequence(spec, rec)
        elif isinstance(spec, RequestSpec):
            if spec.sequence_start and not spec.sequence_id:
                spec = replace(spec, sequence_id=self.new_sequence_id())
            await self._request(spec, rec)
        else:
            raise ValueError(f"a request source produced {type(spec).__name__}, not a RequestSpec or SequenceSpec")

    async def _request(self, spec: RequestSpec, rec: RequestRecord) -> None:
        rec.sent = now()
        try:
            outs = await self._infer(spec, str(next(self._ids)),
                                     decode=spec.check is not None or spec.count_tokens is not None)
        except Exception as exc:  # noqa: BLE001 - a failure is recorded, not raised
            rec.last = now()
            rec.error = format_error(exc)
            return
        rec.first = rec.last = now()
        rec.tokens = rec.responses = 1
        if spec.count_tokens is not None:
            try:
                rec.tokens = int(spec.count_tokens(outs))
            except Exception as exc:  # noqa: BLE001
                rec.error = f"count_tokens raised {type(exc).__name__}: {exc}"
                return
        if spec.check is not None:
            _apply_check(spec.check, outs, rec)

    async def _sequence(self, seq: SequenceSpec, rec: RequestRecord) -> None:
        """A client-driven sequence: one unary call per step, each waiting for the previous."""
        sid = seq.sequence_id or self.new_sequence_id()
        prev: Mapping[str, np.ndarray] | None = None
        history: list[Mapping[str, np.ndarray]] = []
        rec.sent = now()
        for k in itertools.count():
            try:
                spec = seq.step(k, prev)
            except Exception as exc:  # noqa: BLE001
                rec.error = f"sequence step {k} could not be built: {type(exc).__name__}: {exc}"
                break
            if spec is None:
                break
            end = spec.sequence_end or (seq.n_steps is not None and k == seq.n_steps - 1)
            spec = replace(spec, sequence_id=sid, sequence_start=(k == 0), sequence_end=end)
            try:
                prev = await self._infer(spec, str(next(self._ids)), decode=True)
            except Exception as exc:  # noqa: BLE001
                rec.error = f"step {k}: {format_error(exc)}"
                rec.last = now()
                break
            rec.add_token(now())
            history.append(prev)
            if spec.check is not None:
                _apply_check(spec.check, prev, rec)
                if rec.error:
                    break
            if end:
                break
        if rec.error is None and seq.check is not None:
            _apply_check(seq.check, history, rec)

    async def _infer(self, spec: RequestSpec, request_id: str, decode: bool) -> dict[str, np.ndarray] | None:
        raise NotImplementedError


def _apply_check(check: Any, outs: Any, rec: RequestRecord) -> None:
    try:
        msg = check(outs)
    except Exception as exc:  # noqa: BLE001
        msg = f"the check raised {type(exc).__name__}: {exc}"
    if msg:
        rec.error = f"check failed: {msg}"


class GrpcTransport(Transport):
    """Unary inference over gRPC with `tritonclient.grpc.aio` (one channel, many calls in flight)."""

    async def open(self) -> "GrpcTransport":
        """Create the asyncio gRPC client (one channel)."""
        self.client = grpc_aio.InferenceServerClient(self.url)
        return self

    async def _infer(self, spec: RequestSpec, request_id: str, decode: bool) -> dict[str, np.ndarray] | None:
        outputs = [grpcclient.InferRequestedOutput(n) for n in spec.outputs] if spec.outputs else None
        res = await self.client.infer(self.model, infer_inputs(grpcclient, spec.inputs), outputs=outputs,
                                      client_timeout=self.request_timeout_s, **call_args(spec, request_id))
        resp = res.get_response()
        return _answer(res, request_id, resp.id, [o.name for o in resp.outputs], decode)


class HttpTransport(Transport):
    """Unary inference over HTTP/REST with `tritonclient.http.aio` (aiohttp, binary tensors)."""

    async def open(self) -> "HttpTransport":
        """Create the asyncio HTTP client and learn the model's output names."""
        self.client = http_aio.InferenceServerClient(self.url, conn_limit=256,
                                                      conn_timeout=self.request_timeout_s)
        meta = await self.client.get_model_metadata(self.model)
        self._all_outputs = [o["name"] for o in meta.get("outputs", [])]
        return self

    async def _infer(self, spec: RequestSpec, request_id: str, decode: bool) -> dict[str, np.ndarray] | None:
        inputs = infer_inputs(httpclient, spec.inputs, binary_data=True)
        names = list(spec.outputs) if spec.outputs else self._all_outputs
        outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in names]
        res = await self.client.infer(self.model, inputs, outputs=outputs, **call_args(spec, request_id))
        resp = res.get_response()
        return _answer(res, request_id, resp.get("id", request_id), [o["name"] for o in resp.get("outputs", [])],
                       decode)


def call_args(spec: RequestSpec, request_id: str) -> dict[str, Any]:
    """The keyword arguments of one request that every tritonclient call takes alike."""
    return {"request_id": request_id, "sequence_id": spec.sequence_id, "sequence_start": spec.sequence_start,
            "sequence_end": spec.sequence_end, "priority": spec.priority}


def _answer(res: Any, request_id: str, got_id: str, names: list[str], decode: bool) -> dict[str, np.ndarray] | None:
    """The outputs of `res` by name (None unless `decode`), after checking that it answers `request_id`."""
    if got_id != request_id:
        raise RuntimeError(f"answer carries request id {got_id!r}, expected {request_id!r}")
    return {n: res.as_numpy(n) for n in names} if decode else None
