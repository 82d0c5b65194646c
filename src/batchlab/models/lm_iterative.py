"""`lm_iterative`: continuous batching by Triton's own scheduler (`iterative_sequence: true`, decoupled).

One request (`sequence_start=True`, no end) per sequence; each execution advances every sequence
by one token, streams it (TOKEN, INDEX, BATCH_SIZE) and hands the request back with
RELEASE_RESCHEDULE until <eos> or MAX_TOKENS. State is keyed by correlation id; a cancelled request
never runs again, so state idle past `max_sequence_idle_microseconds` (+ margin) is reaped. Each
sequence keeps its KV in its own contiguous cache that doubles when full (`lm.kvcache.KVCache`, what
PagedAttention replaced); every response also says, after the execution, how many token positions
all live sequences' caches hold (KV_TOKENS) and how many they have allocated (KV_SLOTS), and when
the execution ended on the server's monotonic clock (T_NS, ns).
"""

from __future__ import annotations

import time

import numpy as np

from batchlab.lm.generation import Sequence, step
from batchlab.models.triton_io import (InputError, control_value, correlation_id, error,
                                   is_null_request, ok, one_line, pb, send_final)
from batchlab.models._gen_inputs import generation_limits, read_sequences
from batchlab.models.base import StatefulLMModelBase


class TritonPythonModel(StatefulLMModelBase):
    """Triton entry point of `lm_iterative`."""

    def initialize(self, args: dict) -> None:
        super().initialize(args)
        self.max_prompt, self.max_tokens_limit = generation_limits(self.params, self.max_seq_len)

    def forget(self, state: Sequence) -> None:
        """Release a dropped sequence's cache (a step still holding it then fails)."""
        state.release()

    def execute(self, requests: list) -> None:
        utils = pb()
        batch = []  # (request, sender, corr, seq)
        for request in requests:
            sender = request.get_response_sender()
            if is_null_request(request):
                send_final(sender)  # filler slot of the batcher: nothing to do
                continue
            corr = correlation_id(request)
            try:
                if request.is_cancelled():
                    with self.lock:
                        old = self.states.pop(corr, None)
                    if old is not None:
                        old[0].release()
                    send_final(sender, error("request cancelled"))
                    continue
                with self.lock:
                    entry = self.states.get(corr)
                if request.flags() & utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                    # Triton refuses to reschedule a request that also ends its sequence.
                    raise InputError("lm_iterative streams one request per sequence: send "
                                     "sequence_start=True without sequence_end")
                if control_value(request, "START"):
                    if entry is not None:  # a new sequence reusing a stale id
                        entry[0].release()
                    seq = read_sequences(self.lm, request, True, self.max_prompt,
                                         self.max_tokens_limit, seq_id=corr)
                    if len(seq) != 1:
                        raise InputError("one sequence per request: PROMPT must be [1, n]")
                    seq = seq[0]
                elif entry is not None:
                    seq = entry[0]
                else:
                    raise InputError(f"sequence {corr} has no state in model "
                                     f"'{self.model_name}' (reclaimed or never started): "
                                     f"send a new request with sequence_start=True")
                batch.append((request, sender, corr, seq))
            except InputError as exc:
                with self.lock:
                    self.states.pop(corr, None)
                send_final(sender, error(str(exc)))
        if not batch:
            return None
        try:
            tokens = step(self.lm, [b[3] for b in batch])
        except Exception as exc:
            with self.lock:
                for _, _sender, corr, seq in batch:
                    self.states.pop(corr, None)
                    seq.release()
            for _, sender, *_ in batch:
                send_final(sender, error(f"lm_iterative failed: {one_line(exc)}"))
            return None
        now = time.monotonic()
        n = np.array([[len(batch)]], np.int32)
        held, slots = self.kv_usage([b[3] for b in batch])
        sent_ns = np.array([[time.monotonic_ns()]], np.int64)  # the execution's end: its tokens leave now
        for (request, sender, corr, seq), token in zip(batch, tokens):
            response = ok({"TOKEN": np.array([[token]], np.int32),
                           "INDEX": np.array([[len(seq.tokens) - 1]], np.int32),
                           "BATCH_SIZE": n, "KV_TOKENS": held, "KV_SLOTS": slots, "T_NS": sent_ns})
            if seq.done:
                with self.lock:
                    self.states.pop(corr, None)
                seq.release()
                send_final(sender, response)
            else:
                with self.lock:
                    self.states[corr] = (seq, now)
                request.set_release_flags(utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None

    def kv_usage(self, batch: list[Sequence]) -> tuple[np.ndarray, np.ndarray]:
        """Token positions held and allocated by the contiguous caches of every live sequence (this
        execution's, except those it finished, and those waiting for their next), as [[n]] arrays."""
        with self.lock:
            live = {id(s): s for s, _ in self.states.values()}
        live.update({id(s): s for s in batch})
        caches = [s.cache for s in live.values() if s.cache is not None and not s.done]
        return (np.array([[sum(c.length for c in caches)]], np.int32),
                np.array([[sum(c.capacity for c in caches)]], np.int32))
