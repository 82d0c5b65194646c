"""`lm_stream`: continuous batching inside the model, the vLLM / TensorRT-LLM way (decoupled).

`execute` only queues; a scheduler thread steps a `ContinuousBatcher` (one paged KV pool of
`kv_token_budget` tokens in blocks of `block_size`; parameters `max_active`, `max_waiting`,
`step_policy`, `max_num_tokens`, `kv_policy`, `prefix_caching`; its step is `batching.Scheduler`,
the same one `sim.simulate_continuous` prices) and streams each token, FINAL at <eos> or MAX_TOKENS.
Every `cancel_check_ms` it asks the running and some waiting clients whether they cancelled.
Outputs per response, measured by the server: TOKEN, INDEX (position), ACTIVE (sequences in the
step), WAITING, KV_BLOCKS (pool blocks held after the step), KV_TOKENS (their slots holding a
token), T_NS (the server's monotonic clock, ns, when the step ended: ITL measured at the server);
in the final response also CACHED_TOKENS (prompt tokens its last admission found in the prefix
cache), PREEMPTIONS and RECOMPUTED_TOKENS (positions computed again after them).

Speculative decoding (parameter `speculative_method`: off, bigram, ngram or ngram_bigram; `num_speculative_tokens`
k; `prompt_lookup_min` / `_max` for ngram): a greedy request may get several tokens from one step
(all with that step's T_NS); each response then also carries DRAFTED (draft tokens its step verified
for this request), the final one DRAFTED_TOKENS and ACCEPTED_TOKENS (the request's totals).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import time

import numpy as np

from batchlab.batching.blocks import BLOCK_SIZE
from batchlab.batching.policies import ADMISSION, STEP_POLICIES
from batchlab.batching.scheduler import KV_TOKEN_BUDGET, MAX_ACTIVE, MAX_WAITING
from batchlab.lm.batcher import ContinuousBatcher
from batchlab.lm.speculative import DRAFTS, make_draft
from batchlab.models.triton_io import (InputError, choice_param, error, float_param, int_param, ok, one_line,
                                   send_final)
from batchlab.models._gen_inputs import generation_limits, read_sequences
from batchlab.models.base import LMModelBase


#: Parameters of earlier versions, and what replaced them (a config still setting one fails to load).
RETIRED = {"chunked_prefill": "step_policy (prefill_first, mixed or chunked)",
           "prefix_cache_blocks": "prefix_caching (true or false: cached blocks are free blocks of the pool)"}
#: Waiting requests asked about cancellation per check, taking turns: each `is_cancelled` is a
#: round trip to the Triton process, so asking all of them would slow every step as the queue grows.
CANCEL_CHECK_WAITING = 8


class TritonPythonModel(LMModelBase):
    """Triton entry point of `lm_stream`."""

    def initialize(self, args: dict) -> None:
        super().initialize(args)
        self.max_prompt, self.max_tokens_limit = generation_limits(self.params, self.max_seq_len)
        self.cancel_check_s = float_param(self.params, "cancel_check_ms", 20.0) / 1000.0
        self.batcher = self._batcher()
        self.senders: dict[int, tuple[object, object]] = {}  # id(seq) -> (seq, sender)
        self.ids = itertools.count(1)
        self._cancel_turn = 0  # seq_id of the last waiting request asked; the next check goes on after it
        self.cond = threading.Condition()
        self.stopping = False
        self.loop = threading.Thread(target=self._run, name="lm-stream-scheduler", daemon=True)
        self.loop.start()

    def _batcher(self) -> ContinuousBatcher:
        """The batcher the config's parameters describe (0 / false: the knob is off)."""
        p = self.params
        for old, new in RETIRED.items():
            if old in p:
                raise ValueError(f"config parameter {old} is no longer read: use {new}")
        step_policy = choice_param(p, "step_policy", "mixed", tuple(STEP_POLICIES))
        max_num_tokens = int_param(p, "max_num_tokens", 0, 0) or None
        if step_policy == "chunked" and max_num_tokens is None:
            raise ValueError("config parameter step_policy=chunked needs max_num_tokens > 0")
        block_size = int_param(p, "block_size", BLOCK_SIZE, 1, self.max_seq_len)
        method = choice_param(p, "speculative_method", "off", ("off",) + DRAFTS)
        draft = None if method == "off" else make_draft(
            method, self.lm, int_param(p, "prompt_lookup_min", 2, 1, 64), int_param(p, "prompt_lookup_max", 4, 1, 64))
        return ContinuousBatcher(
            self.lm, max_active=int_param(p, "max_active", MAX_ACTIVE, 1, 1024),
            kv_token_budget=int_param(p, "kv_token_budget", KV_TOKEN_BUDGET, block_size),
            kv_policy=choice_param(p, "kv_policy", "reserve", tuple(ADMISSION)),
            step_policy=step_policy, max_num_tokens=max_num_tokens,
            prefix_caching=choice_param(p, "prefix_caching", "false", ("false", "true")) == "true",
            block_size=block_size, max_waiting=int_param(p, "max_waiting", MAX_WAITING, 1),
            draft=draft, num_speculative_tokens=int_param(p, "num_speculative_tokens", 3, 1, 16))

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                (seq,) = read_sequences(self.lm, request, False, self.max_prompt,
                                        self.max_tokens_limit, seq_id=next(self.ids))
                with self.cond:
                    if self.stopping:
                        raise InputError("model is unloading")
                    self.senders[id(seq)] = (seq, sender)  # before the scheduler can see it
                    try:
                        self.batcher.submit(seq)
                    except ValueError:
                        self.senders.pop(id(seq), None)
                        raise
                    self.cond.notify()
            except (InputError, ValueError) as exc:
                send_final(sender, error(str(exc)))
        return None

    def finalize(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.loop.join(timeout=10)
        self._fail_all("unloading", "model is unloading")

    def _fail_all(self, reason: str, message: str) -> None:
        """Drop every waiting and running sequence; each client still there gets `message` as its final error."""
        for seq in self.batcher.drain(reason):
            entry = self.senders.pop(id(seq), None)
            if entry is not None:
                with contextlib.suppress(Exception):  # the client is gone
                    send_final(entry[1], error(message))

    def _check_cancelled(self) -> None:
        running = {id(s) for s in list(self.batcher.active)}
        entries = list(self.senders.items())
        queued = [e for e in entries if e[0] not in running]
        ask = [e for e in entries if e[0] in running]
        if queued:  # in arrival order (seq_id), from where the last check stopped, wrapping round
            queued.sort(key=lambda e: e[1][0].seq_id)
            after = [e for e in queued if e[1][0].seq_id > self._cancel_turn]
            turn = (after + queued[:len(queued) - len(after)])[:CANCEL_CHECK_WAITING]
            ask += turn
            self._cancel_turn = turn[-1][1][0].seq_id
        for key, (seq, sender) in ask:
            try:
                gone = sender.is_cancelled()
            except Exception:
                gone = True
            if gone:
                self.batcher.cancel(seq)
                self.senders.pop(key, None)

    def _run(self) -> None:
        last_check = 0.0
        while True:
            with self.cond:
                while not self.stopping and not self.batcher.has_work:
                    self.cond.wait(0.5)
                if self.stopping:
                    return
            now = time.monotonic()
            if now - last_check >= self.cancel_check_s:
                self._check_cancelled()
                last_check = now
            try:
                report = self.batcher.step()
            except Exception as exc:  # fail every sequence in flight, keep serving
                self._fail_all("error", f"lm_stream failed: {one_line(exc)}")
                continue
            if report.batch_size == 0:  # the policy admitted nobody: do not spin
                with self.cond:
                    self.cond.wait(0.005)
                continue
            self._send(report)

    def _send(self, report) -> None:
        """Stream the step's tokens, each with the step's figures; a sequence's last also with its own."""
        step = {"ACTIVE": np.array([report.batch_size], np.int32),
                "WAITING": np.array([report.n_waiting], np.int32),
                "KV_BLOCKS": np.array([report.kv_blocks], np.int32),
                "KV_TOKENS": np.array([report.kv_tokens], np.int32),
                "T_NS": np.array([time.monotonic_ns()], np.int64)}  # the step's end: its tokens leave now
        left = collections.Counter(id(seq) for seq, _ in report.emitted)  # a verified draft gives several
        for seq, token in report.emitted:
            left[id(seq)] -= 1
            entry = self.senders.get(id(seq))
            if entry is None:
                continue
            outputs = {"TOKEN": np.array([token], np.int32),
                       "INDEX": np.array([len(seq.tokens) - 1 - left[id(seq)]], np.int32), **step}
            if self.batcher.draft is not None:
                outputs["DRAFTED"] = np.array([report.drafted.get(id(seq), 0)], np.int32)
            last = left[id(seq)] == 0
            if last and id(seq) in report.retired:
                outputs.update(self._final_figures(report.retired[id(seq)]))
            try:
                if seq.done and last:
                    self.senders.pop(id(seq), None)
                    send_final(entry[1], ok(outputs))
                else:
                    entry[1].send(ok(outputs))
            except Exception:  # client gone mid-stream: drop the sequence
                self.senders.pop(id(seq), None)
                self.batcher.cancel(seq)

    def _final_figures(self, request) -> dict[str, np.ndarray]:
        """CACHED_TOKENS, PREEMPTIONS and RECOMPUTED_TOKENS of a finished sequence's request (and with
        speculation DRAFTED_TOKENS, ACCEPTED_TOKENS)."""
        out = {"CACHED_TOKENS": np.array([request.cached_tokens], np.int32),
               "PREEMPTIONS": np.array([request.preemptions], np.int32),
               "RECOMPUTED_TOKENS": np.array([request.recomputed_tokens], np.int32)}
        if self.batcher.draft is not None:
            out.update(DRAFTED_TOKENS=np.array([request.drafted], np.int32),
                       ACCEPTED_TOKENS=np.array([request.accepted], np.int32))
        return out
