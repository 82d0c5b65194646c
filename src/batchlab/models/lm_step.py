"""`lm_step` / `lm_step_oldest`: one decode step of one sequence per request, behind Triton's
sequence batcher. START carries the prompt in TOKENS (and TEMPERATURE, SEED); later requests one
token or none (the last one is fed back). KV caches are keyed by correlation id: END frees one, a
reaper those idle past `max_sequence_idle_microseconds` plus a margin (Triton sends no END then).
Outputs: TOKEN, LENGTH (of this cache), BATCH_SIZE, LIVE_SEQUENCES, KV_TOKENS (after the step) and
SLOT, the request's position in the execution (with `direct`: its sequence's batch slot).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from batchlab.lm.kvcache import KVCache
from batchlab.lm.generation import check_prompt
from batchlab.lm.sampling import make_rng, sample
from batchlab.models.triton_io import (InputError, control_value, correlation_id, error,
                                   expect_dtype, get, is_null_request, ok, one_line)
from batchlab.models._gen_inputs import generation_limits
from batchlab.models.base import StatefulLMModelBase
from batchlab.lm.vocab import PAD_ID


@dataclass
class _SeqState:
    cache: KVCache
    rng: np.random.Generator
    temperature: float
    last_token: int = PAD_ID


def _scalar(arr: np.ndarray | None, name: str, kinds: str, default):
    if arr is None:
        return default
    expect_dtype(arr, name, kinds)
    if arr.size != 1:
        raise InputError(f"input {name} must hold one value, got shape {list(arr.shape)}")
    return arr.reshape(-1)[0]


def _response(**outputs: int):
    """A response whose outputs are each one int32 value, shaped [1, 1]."""
    return ok({name: np.array([[value]], np.int32) for name, value in outputs.items()})


class TritonPythonModel(StatefulLMModelBase):
    """Triton entry point of the stateful `lm_step` models."""

    def initialize(self, args: dict) -> None:
        super().initialize(args)
        self.max_prompt = generation_limits(self.params, self.max_seq_len)[0]

    def _prepare(self, request) -> tuple[int, _SeqState, np.ndarray, bool]:
        """(corrid, state, chunk, end) of a real request; InputError if it cannot step."""
        corr = correlation_id(request)
        start = control_value(request, "START")
        end = bool(control_value(request, "END"))
        tokens = get(request, "TOKENS")
        if tokens is not None:
            expect_dtype(tokens, "TOKENS", "iu")
            if tokens.ndim != 2 or tokens.shape[0] != 1:
                raise InputError(f"input TOKENS has shape {list(tokens.shape)}, expected [1, n]"
                                 " (one sequence step per request)")
            tokens = tokens[0]
        if start:
            if tokens is None:
                raise InputError("the START request of a sequence must carry the prompt in "
                                 "TOKENS")
            try:
                prompt = check_prompt(tokens, self.vocab_size, self.max_prompt)
            except ValueError as exc:
                raise InputError(str(exc)) from None
            temperature = float(_scalar(get(request, "TEMPERATURE"), "TEMPERATURE", "f", 0.0))
            if not np.isfinite(temperature) or temperature < 0:
                raise InputError(f"TEMPERATURE must be a finite number >= 0, got {temperature}")
            seed = int(_scalar(get(request, "SEED"), "SEED", "iu", 0))
            if seed < 0:
                raise InputError(f"SEED must be >= 0, got {seed}")
            state = _SeqState(self.lm.new_cache(prompt.size), make_rng(seed), temperature)
            return corr, state, prompt, end
        with self.lock:
            state = self.states.get(corr, (None,))[0]
        if state is None:
            raise InputError(
                f"sequence {corr} has no KV cache in model '{self.model_name}': its first "
                f"request must set START (a sequence idle for more than "
                f"{self.reap_after:.1f} s is reclaimed)")
        if tokens is None:
            chunk = np.array([state.last_token], dtype=np.int32)
        else:
            if tokens.size != 1:
                raise InputError(f"a step after START takes at most one token in TOKENS, got "
                                 f"{tokens.size}")
            t = int(tokens[0])
            if not 0 < t < self.vocab_size:
                raise InputError(f"TOKENS holds id {t}, outside [1, {self.vocab_size})")
            chunk = np.array([t], dtype=np.int32)
        if state.cache.length + 1 > self.max_seq_len:
            raise InputError(f"sequence {corr} is full ({self.max_seq_len} tokens): end it")
        return corr, state, chunk, end

    def execute(self, requests: list) -> list:
        responses: list = [None] * len(requests)
        work = []  # (index, corr, state, chunk, end, start)
        seen: set[int] = set()
        for i, request in enumerate(requests):
            if is_null_request(request):
                responses[i] = _response(TOKEN=PAD_ID, LENGTH=0, BATCH_SIZE=0, LIVE_SEQUENCES=0, KV_TOKENS=0, SLOT=i)
                continue
            corr = correlation_id(request)
            try:
                if corr in seen:
                    raise InputError(f"sequence {corr} has two requests in one execution")
                seen.add(corr)
                corr, state, chunk, end = self._prepare(request)
                work.append((i, corr, state, chunk, end, bool(control_value(request, "START"))))
            except InputError as exc:
                responses[i] = error(str(exc))
                if control_value(request, "END"):
                    with self.lock:
                        self.states.pop(corr, None)
        if not work:
            return responses
        try:
            logits = self.lm.forward([w[2].cache for w in work], [w[3] for w in work])
        except Exception as exc:
            with self.lock:
                for i, corr, *_ in work:
                    responses[i] = error(f"lm_step failed: {one_line(exc)}")
                    self.states.pop(corr, None)
            return responses
        now = time.monotonic()
        tokens = []
        with self.lock:
            for (_i, corr, state, _chunk, end, _start), row in zip(work, logits):
                token = sample(row, state.temperature, state.rng)
                state.last_token = token
                tokens.append(token)
                if end:
                    self.states.pop(corr, None)
                else:
                    self.states[corr] = (state, now)
            live = len(self.states)
            kv = sum(s.cache.length for s, _ in self.states.values())
        for (i, _corr, state, _chunk, _end, _start), token in zip(work, tokens):
            responses[i] = _response(TOKEN=token, LENGTH=state.cache.length, BATCH_SIZE=len(work),
                                     LIVE_SEQUENCES=live, KV_TOKENS=kv, SLOT=i)
        return responses
