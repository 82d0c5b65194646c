"""Decoupled models over gRPC bidirectional streams, responses matched to requests by id: the first
data response is the first token, each one token, the empty final one the end. tritonclient's asyncio `stream_infer` refuses ``triton_`` parameters: we use the stub.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Mapping

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import InferRequestedOutput, InferResult, service_pb2_grpc
from tritonclient.grpc._utils import _get_inference_request

from batchlab.load.records import RequestRecord
from batchlab.load.transport import Transport, _apply_check, call_args, format_error, infer_inputs, now
from batchlab.load.workload import RequestSpec, SequenceSpec

_MAX_MSG = 2**31 - 1


@dataclass
class _Pending:
    rid: str
    spec: RequestSpec
    rec: RequestRecord
    done: asyncio.Future
    outputs: list[Mapping[str, np.ndarray]] = field(default_factory=list)


class StreamTransport(Transport):
    """Requests to a decoupled model on one gRPC stream."""

    def __init__(self, url: str, model: str, request_timeout_s: float = 60.0) -> None:
        super().__init__(url, model, request_timeout_s)
        self._pending: dict[str, _Pending] = {}
        self._queue: asyncio.Queue | None = None
        self._reader: asyncio.Task | None = None
        self._call: Any = None
        self._broken: str | None = None

    async def open(self) -> "StreamTransport":
        """Open the channel and start the bidirectional stream with its reader."""
        self._channel = grpc.aio.insecure_channel(
            self.url, options=[("grpc.max_send_message_length", _MAX_MSG),
                               ("grpc.max_receive_message_length", _MAX_MSG)])
        stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._queue = asyncio.Queue()
        self._call = stub.ModelStreamInfer(self._requests(self._queue))
        self._reader = asyncio.get_running_loop().create_task(self._read(self._call))
        return self

    async def close(self) -> None:
        """Half-close the stream, let the reader finish, fail whatever is still pending."""
        if self._call is not None:
            self._queue.put_nowait(None)  # ends the request iterator: grpc half-closes the stream
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), 5)
            except Exception:  # noqa: BLE001
                self._reader.cancel()
            self._call.cancel()
        self._fail_all("stream closed before the request completed")
        if getattr(self, "_channel", None) is not None:
            await self._channel.close()
            self._channel = None
        self._queue = self._call = self._reader = None

    @staticmethod
    async def _requests(q: asyncio.Queue):
        while True:
            req = await q.get()
            if req is None:
                return
            yield req

    def _fail_all(self, message: str) -> None:
        for p in list(self._pending.values()):
            p.rec.error = p.rec.error or message
            p.rec.last = now()
            self._finish(p)

    async def _read(self, call: Any) -> None:
        try:
            async for resp in call:
                t = now()
                ir = resp.infer_response
                p = self._pending.get(ir.id)
                if p is None:
                    if resp.error_message and len(self._pending) == 1:  # an error without an id
                        p = next(iter(self._pending.values()))
                    else:
                        continue
                if resp.error_message:
                    p.rec.error = f"[server] {resp.error_message}"
                    p.rec.last = t
                    self._finish(p)
                    continue
                if len(ir.outputs):
                    p.rec.add_token(t)
                    if p.spec.check is not None:
                        res = InferResult(ir)
                        p.outputs.append({o.name: res.as_numpy(o.name) for o in ir.outputs})
                param = ir.parameters.get("triton_final_response")
                if param is not None and param.bool_param:
                    if p.rec.tokens == 0:
                        p.rec.first = p.rec.last = t
                    self._finish(p)
        except Exception as exc:  # noqa: BLE001 - the stream broke: every waiting request fails
            self._broken = f"stream failed: {format_error(exc)}"
            self._fail_all(self._broken)
            return
        if self._pending:
            self._broken = "the server closed the stream"
            self._fail_all(self._broken)

    def _finish(self, p: _Pending) -> None:
        self._pending.pop(p.rid, None)
        if not p.done.done():
            p.done.set_result(None)

    async def _request(self, spec: RequestSpec, rec: RequestRecord) -> None:
        if self._broken:
            rec.sent = rec.last = now()
            rec.error = self._broken
            return
        outputs = [InferRequestedOutput(n) for n in spec.outputs] if spec.outputs else None
        rid = str(next(self._ids))
        req = _get_inference_request(model_name=self.model, inputs=infer_inputs(grpcclient, spec.inputs),
                                     model_version="", outputs=outputs, timeout=None, parameters=None,
                                     **call_args(spec, rid))
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        p = _Pending(rid, spec, rec, asyncio.get_running_loop().create_future())
        self._pending[rid] = p
        rec.sent = now()
        self._queue.put_nowait(req)
        try:
            await asyncio.wait_for(asyncio.shield(p.done), self.request_timeout_s)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            rec.error = f"client timeout: request not complete after {self.request_timeout_s:g} s"
            rec.last = now()
            return
        if rec.error is None and spec.check is not None:
            _apply_check(spec.check, p.outputs, rec)
        if rec.error is None and spec.expected_tokens is not None and rec.tokens != spec.expected_tokens:
            rec.error = f"check failed: {rec.tokens} tokens, expected {spec.expected_tokens}"

    async def _sequence(self, seq: SequenceSpec, rec: RequestRecord) -> None:
        raise ValueError("client-driven sequences (SequenceSpec) go over 'grpc' or 'http', not a stream")
