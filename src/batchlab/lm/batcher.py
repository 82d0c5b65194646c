"""The continuous-batching engine on the real `ToyLM`: `batching.Scheduler` decides every step,
`ContinuousBatcher` executes it on one paged `KVPool` (the model instance's KV memory) and keeps the
waiting queue thread-safe for `lm_stream`, whose scheduler thread calls `step()` while request
threads `submit` and `cancel`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from batchlab._validate import choice, count, optional_count
from batchlab.batching.blocks import BLOCK_SIZE, BlockManager
from batchlab.batching.policies import ADMISSION
from batchlab.batching.request import GenerationRequest, StepPlan
from batchlab.batching.scheduler import KV_TOKEN_BUDGET, MAX_ACTIVE, Scheduler
from batchlab.batching.speculative import accept
from batchlab.lm.generation import Sequence, step_chunks
from batchlab.lm.kvcache import KVPool, PagedKV
from batchlab.lm.model import ToyLM
from batchlab.lm.speculative import Draft, make_draft


@dataclass
class StepReport:
    """What one step did: `emitted` (sequence, token) per sequence that sampled a token (a prompt
    part-way samples none), `admitted` with the prompt tokens each found in the prefix cache
    (`cached_tokens`), `preempted`, `finished`; after it: requests waiting, KV blocks held
    (`kv_blocks`) and the token slots of those blocks holding KV (`kv_tokens`; a shared block counts
    once); positions computed again after preemptions (`recomputed_tokens`); sequences computed
    (`batch_size`) and the step's duration; `retired`: the scheduler's `GenerationRequest` of each sequence
    that finished (its counters), by ``id(sequence)``. With speculative decoding a sequence may emit
    several tokens in one step (one `emitted` pair each, in order); `drafted`: the draft tokens
    the step verified for each sequence that had some, by ``id(sequence)``."""

    emitted: list[tuple[Sequence, int]] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    n_waiting: int = 0
    kv_blocks: int = 0
    kv_tokens: int = 0
    recomputed_tokens: int = 0
    retired: dict[int, GenerationRequest] = field(default_factory=dict)
    drafted: dict[int, int] = field(default_factory=dict)
    batch_size: int = 0
    seconds: float = 0.0


class ContinuousBatcher:
    """`batching.Scheduler` run on the real `ToyLM` over one KV pool of ``kv_token_budget //
    block_size`` blocks. `kv_policy` picks the admission policy ("reserve": prompt + max_tokens held
    from the start, never preempted; "on_demand": blocks as sequences grow, preempting the newest
    when the pool runs out), `step_policy` the step's shape ("prefill_first", "mixed", "chunked",
    the last with `max_num_tokens`), `prefix_caching` whether full blocks are shared by hash.
    `draft` turns on speculative decoding: a `Draft` (or "bigram" / "ngram") proposes up to
    `num_speculative_tokens` tokens for each greedy decoding sequence, verified in the next step by
    the acceptance rule `self.accept` (`batching.speculative.accept`; a lab's model swaps in its own).
    A waiting queue bounded by `max_waiting`; `submit` and `cancel` may be called from other threads."""

    def __init__(self, lm: ToyLM, max_active: int = MAX_ACTIVE, kv_token_budget: int = KV_TOKEN_BUDGET,
                 kv_policy: str = "reserve", step_policy: str = "mixed", max_num_tokens: int | None = None,
                 prefix_caching: bool = False, block_size: int = BLOCK_SIZE, max_waiting: int | None = None,
                 draft: Draft | str | None = None, num_speculative_tokens: int = 3) -> None:
        optional_count("max_waiting", max_waiting)
        self.num_speculative_tokens = count("num_speculative_tokens", num_speculative_tokens)
        self.draft = make_draft(draft, lm) if isinstance(draft, str) else draft
        self.accept = accept
        block_size = count("block_size", block_size)
        n_blocks = count("kv_token_budget", kv_token_budget) // block_size
        if n_blocks < 1:
            raise ValueError(f"kv_token_budget={kv_token_budget} holds no block of {block_size} tokens")
        policy = ADMISSION[choice("kv_policy", kv_policy, tuple(ADMISSION))]()
        self.lm = lm
        self.max_waiting = max_waiting
        self.pool = KVPool(lm.config, n_blocks, block_size)
        self.blocks = BlockManager(n_blocks, block_size, prefix_caching)
        self.scheduler = Scheduler(self.blocks, policy, max_active, max_num_tokens, step_policy)
        self._lock = threading.Lock()
        self._in_step: set[int] = set()
        self._cancelled_in_step: list[tuple[Sequence, str]] = []

    @property
    def active(self) -> list[Sequence]:
        """Running sequences, in admission order."""
        return [r.payload for r in self.scheduler.running]

    @property
    def n_waiting(self) -> int:
        """Sequences waiting for admission."""
        return len(self.scheduler.waiting)

    @property
    def has_work(self) -> bool:
        """True while anything waits or runs."""
        return self.scheduler.has_work

    def submit(self, seq: Sequence) -> GenerationRequest:
        """Queue a sequence; ValueError if the pool could never hold it or the queue is full."""
        if seq.done:
            raise ValueError("cannot submit a finished sequence")
        request = GenerationRequest(seq.seq_id, seq.prompt.tolist() + list(seq.tokens), seq.max_tokens, payload=seq,
                          prompt_tokens=int(seq.prompt.size), generated=len(seq.tokens))
        with self._lock:
            if self.max_waiting is not None and self.n_waiting >= self.max_waiting:
                raise ValueError(f"queue full: {self.n_waiting} requests already wait "
                                 f"(max_waiting {self.max_waiting})")
            self.scheduler.submit(request)
        return request

    def cancel(self, seq: Sequence, reason: str = "cancelled") -> None:
        """Drop a waiting or running sequence and free its blocks (during a step, when it ends)."""
        with self._lock:
            if id(seq) in self._in_step:
                self._cancelled_in_step.append((seq, reason))
                return
            for request in [*self.scheduler.waiting, *self.scheduler.running]:
                if request.payload is seq:
                    self.scheduler.remove(request)
        seq.cancel(reason)

    def drain(self, reason: str = "shutdown") -> list[Sequence]:
        """Cancel everything; return the sequences that were waiting or running. After a failed step
        ("error") the cached blocks are forgotten too (they may be half written)."""
        with self._lock:
            scheduler = self.scheduler
            everyone = list(scheduler.waiting) + scheduler.running
            for request in everyone:
                scheduler.remove(request)
            if reason == "error":
                self.blocks.reset_cache()
        dropped = [r.payload for r in everyone]
        for s in dropped:
            s.cancel(reason)
        return dropped

    def step(self) -> StepReport:
        """Plan one step, run it on the LM (prompt chunks and decodes through the pool), retire."""
        report = StepReport()
        t0 = time.perf_counter()
        with self._lock:
            plan = self._plan(report)
            batch = [r.payload for r in plan.batch]
            drafts = [list(r.draft) for r in plan.batch]
            self._in_step = {id(s) for s in batch}
        if batch:
            try:
                sizes = [n for _, n in plan.work]
                tokens = (step_chunks(self.lm, batch, sizes, drafts, self.accept) if any(drafts)
                          else step_chunks(self.lm, batch, sizes))
            finally:
                with self._lock:
                    self._in_step = set()
                    cancelled, self._cancelled_in_step = self._cancelled_in_step, []
            self._finish(plan, tokens, report)
            for s, reason in cancelled:
                self.cancel(s, reason)
            gone = {id(s) for s, _ in cancelled}
            report.emitted = [(s, t) for s, out in zip(batch, tokens) if id(s) not in gone
                              for t in ([] if out is None else out if isinstance(out, list) else [out])]
            report.finished = list(dict.fromkeys(s for s, _ in report.emitted if s.done))
            report.drafted = {id(s): len(d) for s, d in zip(batch, drafts) if d}
        report.seconds = time.perf_counter() - t0
        return report

    def _propose(self) -> None:
        """Speculative decoding: each running greedy sequence that decodes gets up to k draft tokens,
        never more than its max_tokens leave room for (the scheduler trims them to the budget)."""
        for request in self.scheduler.running:
            room = min(self.num_speculative_tokens, request.max_tokens - request.generated - 1)
            if request.decoding and request.payload.temperature == 0.0 and room > 0:
                request.draft = self.draft.propose(request.token_ids, room)[:room]

    def _plan(self, report: StepReport) -> StepPlan:
        """Schedule (under the lock); drop the KV views of the preempted, give the admitted theirs."""
        if self.draft is not None:
            self._propose()
        plan = self.scheduler.schedule()
        for request in plan.preempted:
            request.payload.cache = None  # its blocks are freed: recomputed when readmitted
        for request in plan.admitted:
            request.payload.cache = PagedKV(self.pool, request.table, request.computed)
        report.admitted = [r.payload for r in plan.admitted]
        report.cached_tokens = [r.cached_tokens for r in plan.admitted]
        report.preempted = [r.payload for r in plan.preempted]
        report.n_waiting = self.n_waiting
        report.batch_size = len(plan.work)
        report.recomputed_tokens = sum(n for r, n in plan.work) - plan.useful_tokens
        return plan

    def _finish(self, plan: StepPlan, tokens: list[int | None], report: StepReport) -> None:
        """Record the sampled tokens in the scheduler, retire the finished, count the pool."""
        with self._lock:
            stopped = [r for r in plan.batch if r.payload.done]  # <eos> before max_tokens
            for request in self.scheduler.complete(plan, tokens, stopped):
                request.payload.release()
                report.retired[id(request.payload)] = request
            held = [(r.table, r.computed) for r in self.scheduler.running]
            report.kv_blocks, report.kv_tokens = self.blocks.usage(held)
