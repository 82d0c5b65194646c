"""Iteration-level (continuous) batching, the scheduler loop of the `lm_stream` model: each step
admits waiting sequences (by a replaceable policy), prefills and decodes in one forward pass."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol, Sequence as Seq

from batchlab._validate import count, optional_count
from batchlab.lm.generation import Sequence, step as lm_step
from batchlab.lm.model import ToyLM


@dataclass(frozen=True)
class SeqInfo:
    """What an admission policy may look at for one sequence."""

    seq_id: object
    prompt_tokens: int
    max_tokens: int
    generated: int
    waited_s: float = 0.0

    @property
    def reserved_tokens(self) -> int:
        """KV tokens the sequence may come to hold (prompt + max_tokens)."""
        return self.prompt_tokens + self.max_tokens

    @property
    def kv_tokens(self) -> int:
        """KV tokens held now: prompt + generated − 1 (0 before the prefill)."""
        return self.prompt_tokens + self.generated - 1 if self.generated else 0


class AdmissionPolicy(Protocol):
    """Decides, before every step, which waiting sequences join the running batch."""

    def check(self, candidate: SeqInfo) -> None:
        """Raise ValueError if `candidate` could never be admitted (it is then rejected)."""

    def admit(self, waiting: Seq[SeqInfo], active: Seq[SeqInfo]) -> list[int]:
        """Indices into `waiting` (arrival order) of the sequences to admit now."""


#: lm_stream's defaults (config parameters of the same names): sequences generating at once,
#: KV tokens (prompt + max_tokens) the active ones may reserve, requests that may wait.
MAX_ACTIVE = 8
KV_TOKEN_BUDGET = 4096
MAX_WAITING = 256


@dataclass
class FCFSAdmission:
    """First come, first served under a cap on active sequences and a KV-token budget (each
    reserves prompt + max_tokens for its life); nobody overtakes the head of the queue."""

    max_active: int = MAX_ACTIVE
    kv_token_budget: int = KV_TOKEN_BUDGET

    def __post_init__(self) -> None:
        for name in ("max_active", "kv_token_budget"):
            count(name, getattr(self, name))

    def check(self, candidate: SeqInfo) -> None:
        """Reject a sequence that needs more KV tokens than the whole budget."""
        if candidate.reserved_tokens > self.kv_token_budget:
            raise ValueError(f"request needs {candidate.reserved_tokens} KV tokens "
                             f"(prompt + max_tokens), the budget is {self.kv_token_budget}")

    def admit(self, waiting: Seq[SeqInfo], active: Seq[SeqInfo]) -> list[int]:
        """Admit from the head while the active count and the reserved tokens fit."""
        n_active = len(active)
        reserved = sum(a.reserved_tokens for a in active)
        chosen: list[int] = []
        for i, cand in enumerate(waiting):
            if (n_active >= self.max_active
                    or reserved + cand.reserved_tokens > self.kv_token_budget):
                break
            chosen.append(i)
            n_active += 1
            reserved += cand.reserved_tokens
        return chosen


@dataclass
class StepReport:
    """What one step did: `emitted` (sequence, token) per sequence in the batch, `admitted`,
    `finished`, waiting count and KV tokens held after it, and its duration."""

    emitted: list[tuple[Sequence, int]] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    n_waiting: int = 0
    kv_tokens: int = 0
    seconds: float = 0.0

    @property
    def batch_size(self) -> int:
        """Sequences in this execution."""
        return len(self.emitted)


def info_of(seq: Sequence, now: float | None = None, since: float | None = None) -> SeqInfo:
    """The `SeqInfo` view of a sequence."""
    waited = 0.0 if now is None or since is None else max(0.0, now - since)
    return SeqInfo(seq.seq_id, int(seq.prompt.size), seq.max_tokens, len(seq.tokens), waited)


class ContinuousBatcher:
    """Waiting queue (bounded by `max_waiting`), running batch and admission policy; `step()` runs one
    iteration. `submit` and `cancel` may be called from other threads."""

    def __init__(self, lm: ToyLM, policy: AdmissionPolicy | None = None,
                 max_waiting: int | None = None) -> None:
        optional_count("max_waiting", max_waiting)
        self.lm = lm
        self.policy = policy if policy is not None else FCFSAdmission()
        self.max_waiting = max_waiting
        self._waiting: deque[tuple[Sequence, float]] = deque()
        self.active: list[Sequence] = []
        self._lock = threading.Lock()
        self._batch: list[Sequence] = []
        self._cancelled_in_step: list[tuple[Sequence, str]] = []

    @property
    def n_waiting(self) -> int:
        """Sequences waiting for admission."""
        return len(self._waiting)

    @property
    def has_work(self) -> bool:
        """True while anything waits or runs."""
        return bool(self._waiting) or bool(self.active)

    def submit(self, seq: Sequence) -> None:
        """Queue a sequence; ValueError if the policy could never admit it or the queue is full."""
        if seq.done:
            raise ValueError("cannot submit a finished sequence")
        self.policy.check(info_of(seq))
        with self._lock:
            if self.max_waiting is not None and len(self._waiting) >= self.max_waiting:
                raise ValueError(f"queue full: {len(self._waiting)} requests already wait "
                                 f"(max_waiting {self.max_waiting})")
            self._waiting.append((seq, time.monotonic()))

    def cancel(self, seq: Sequence, reason: str = "cancelled") -> None:
        """Drop a waiting or running sequence and free its cache (during a step, when it ends)."""
        with self._lock:
            self._waiting = deque((s, t) for s, t in self._waiting if s is not seq)
            if seq in self.active:
                self.active.remove(seq)
            if any(s is seq for s in self._batch):
                self._cancelled_in_step.append((seq, reason))
                return
        seq.cancel(reason)

    def drain(self, reason: str = "shutdown") -> list[Sequence]:
        """Cancel everything; return the sequences that were waiting or running."""
        with self._lock:
            dropped = [s for s, _ in self._waiting] + self.active
            self._waiting.clear()
            self.active = []
        for s in dropped:
            s.cancel(reason)
        return dropped

    def step(self) -> StepReport:
        """Admit, run one mixed prefill/decode execution over the batch, retire finished."""
        report = StepReport()
        t0 = time.perf_counter()
        with self._lock:
            now = time.monotonic()
            waiting = list(self._waiting)
            chosen = self.policy.admit([info_of(s, now, t) for s, t in waiting],
                                       [info_of(s) for s in self.active])
            chosen = sorted(set(int(i) for i in chosen))
            if any(not 0 <= i < len(waiting) for i in chosen):
                raise ValueError(f"admission policy returned an index outside the queue: {chosen}")
            admitted = [waiting[i][0] for i in chosen]
            keep = set(chosen)
            self._waiting = deque(w for i, w in enumerate(waiting) if i not in keep)
            self.active.extend(admitted)
            batch = list(self.active)
            self._batch = batch
            report.n_waiting = len(self._waiting)
        report.admitted = admitted
        if batch:
            try:
                tokens = lm_step(self.lm, batch)
            finally:
                with self._lock:
                    self._batch = []
                    cancelled = self._cancelled_in_step
                    self._cancelled_in_step = []
                for s, reason in cancelled:
                    s.cancel(reason)
            gone = {id(s) for s, _ in cancelled}
            report.emitted = [(s, t) for s, t in zip(batch, tokens) if id(s) not in gone]
            with self._lock:
                for s, _ in report.emitted:
                    if s.done:
                        if s in self.active:
                            self.active.remove(s)
                        s.release()
                        report.finished.append(s)
                report.kv_tokens = sum(s.cache.length for s in self.active if s.cache is not None)
        report.seconds = time.perf_counter() - t0
        return report
