"""Iteration-level (continuous) batching, written once: `ContinuousScheduler` decides every step
(admit, evict, plan the prefill and decode work, retire); whoever owns it executes the plan.
`ContinuousBatcher` (the `lm_stream` model) runs it on the real `ToyLM`; `sim.continuous` prices
it with a cost model. Orca calls this iteration-level scheduling, TensorRT-LLM in-flight batching;
Triton's own core offers it as `sequence_batching { iterative_sequence: true }`."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence as Seq

from batchlab._validate import choice, count, optional_count
from batchlab.lm.generation import Sequence, step_chunks
from batchlab.lm.model import ToyLM
from batchlab.lm.prefix_cache import PrefixCache, block_keys, kv_block, load_blocks


class AdmissionPolicy(Protocol):
    """Decides, before every step, which waiting sequences join the running batch; it reads the
    scheduler's `GenerationRequest`s (prompt_tokens, max_tokens, generated, reserved_tokens, kv_tokens)."""

    def check(self, candidate: GenerationRequest) -> None:
        """Raise ValueError if `candidate` could never be admitted (it is then rejected)."""

    def admit(self, waiting: Seq[GenerationRequest], active: Seq[GenerationRequest]) -> list[int]:
        """Indices into `waiting` (arrival order) of the sequences to admit now."""


#: lm_stream's defaults (config parameters of the same names): sequences generating at once,
#: KV tokens (prompt + max_tokens) the active ones may reserve, requests that may wait.
MAX_ACTIVE = 8
KV_TOKEN_BUDGET = 4096
MAX_WAITING = 256


@dataclass
class FCFSAdmission:
    """First come, first served under a cap on active sequences and a KV-token budget (each
    claims its `reserved_tokens`: prompt + max_tokens for life; None: no KV limit); nobody
    overtakes the head of the queue."""

    max_active: int = MAX_ACTIVE
    kv_token_budget: int | None = KV_TOKEN_BUDGET

    def __post_init__(self) -> None:
        count("max_active", self.max_active)
        optional_count("kv_token_budget", self.kv_token_budget)

    def check(self, candidate: GenerationRequest) -> None:
        """Reject a sequence that needs more KV tokens than the whole budget."""
        if self.kv_token_budget is not None and candidate.reserved_tokens > self.kv_token_budget:
            raise ValueError(f"request needs {candidate.reserved_tokens} KV tokens "
                             f"(prompt + max_tokens), the budget is {self.kv_token_budget}")

    def admit(self, waiting: Seq[GenerationRequest], active: Seq[GenerationRequest]) -> list[int]:
        """Admit from the head while the active count and the reserved tokens fit."""
        budget = self.kv_token_budget
        n_active = len(active)
        # Reserving a sequence's whole future up front means it can never run out of KV
        # mid-generation (TensorRT-LLM's `guaranteed_no_evict`); the price is idle memory.
        # (Under the scheduler's kv_policy="on_demand" a request claims less: see GenerationRequest.)
        reserved = 0 if budget is None else sum(a.reserved_tokens for a in active)
        chosen: list[int] = []
        for i, candidate in enumerate(waiting):
            if n_active >= self.max_active:
                break  # every slot is taken (vLLM's max_num_seqs)
            if budget is not None and reserved + candidate.reserved_tokens > budget:
                break  # the head does not fit: stop, do not let a smaller one overtake it
            chosen.append(i)
            n_active += 1
            reserved += candidate.reserved_tokens
        return chosen


def prefill_chunks(remaining: list[int], n_decoding: int, max_num_tokens: int) -> list[int]:
    """Chunked prefill's split of one iteration (Sarathi-Serve; vLLM's `max_num_batched_tokens`,
    TensorRT-LLM's `max_num_tokens`): the prompt tokens each prefilling request computes now, in
    queue order, given the prompt tokens it has left (`remaining`) and the decodes running."""
    # The decodes take their one token each first: a running sequence's next token is never
    # delayed by someone else's prompt, so no step grows past the budget and ITL stays flat.
    room = max_num_tokens - n_decoding
    chunks = []
    for left in remaining:
        # The earliest prompt gets what is left first (nobody overtakes it); it never takes more
        # than its prompt still needs, and with no room left it waits for the next iteration.
        chunk = max(0, min(left, room))
        chunks.append(chunk)
        room -= chunk
    return chunks


#: The split's signature: (remaining, n_decoding, max_num_tokens) -> chunks (a lab writes its own).
PrefillSplit = Callable[[list[int], int, int], list[int]]


@dataclass(eq=False, slots=True)
class GenerationRequest:
    """One generation as the scheduler tracks it, and what an admission policy reads; `payload` is
    what the executor needs (the real `Sequence`, or nothing in the simulator)."""

    seq_id: object
    prompt_tokens: int
    max_tokens: int
    reserved_tokens: int             # KV tokens it claims against the policy's budget.
    # kv_policy="reserve": its whole future, fixed (prompt + max_tokens on the real path; the
    # exact peak prompt + output - 1 in the simulator, which knows the output);
    # "on_demand": what it holds now plus the one token a decode adds (set by the scheduler)
    payload: object = None
    generated: int = 0               # output tokens produced so far
    prefill_target: int = 0          # positions the current prefill must compute (0: the prompt)
    prefilled: int = 0               # of which computed
    kv_tokens: int = 0               # KV tokens stored
    kv_allocated: int = 0            # KV tokens counted against the budget
    recomputing: bool = False        # prefilling again after an eviction
    preemptions: int = 0
    prefix_keys: tuple = ()          # prefix caching: the keys of its prompt's full blocks
    cached_tokens: int = 0           # prompt tokens its last admission took from the prefix cache
    prefix_blocks: list = field(default_factory=list)  # those blocks' KV, until the executor loads it

    def __post_init__(self) -> None:
        self.prefill_target = self.prefill_target or self.prompt_tokens

    @classmethod
    def reserving(cls, seq_id: object, prompt_tokens: int, max_tokens: int, generated: int = 0) -> GenerationRequest:
        """A request that reserves prompt + max_tokens and holds the KV of its prompt and `generated`
        tokens so far (prompt + generated - 1 once started), as a policy sees it."""
        return cls(seq_id, prompt_tokens, max_tokens, prompt_tokens + max_tokens, generated=generated,
                   kv_tokens=prompt_tokens + generated - 1 if generated else 0)


@dataclass
class StepPlan:
    """One iteration's work: `batch` (running order) = `decode` (one token each) + `prefill`
    (request, prompt tokens to compute now); the token counts a cost model prices."""

    admitted: list[GenerationRequest] = field(default_factory=list)
    batch: list[GenerationRequest] = field(default_factory=list)
    decode: list[GenerationRequest] = field(default_factory=list)
    prefill: list[tuple[GenerationRequest, int]] = field(default_factory=list)
    prefill_tokens: int = 0
    context_tokens: int = 0          # KV positions the decodes attend to (each includes itself)
    useful_tokens: int = 0           # tokens computed for the first time (recomputes excluded)
    kv_tokens: int = 0               # KV tokens counted against the budget during the step


class ContinuousScheduler:
    """The continuous-batching step, free of any model: `schedule()` plans one iteration, the
    caller executes it (real LM or cost model), `complete(plan)` retires what finished.
    `kv_policy` "reserve" holds `reserved_tokens` per request for life; "on_demand" holds what is
    stored and evicts the newest request (recomputed later) when the decodes outgrow
    `kv_token_budget` (the policy's budget: the policy admits, the scheduler only evicts).
    With a `prefix_cache`, the driver calls `match_prefixes()` before and `cache_prefills(plan)`
    after each execution: a request prefills only the prompt blocks not cached. With
    `chunked_prefill`, `prefill_split` (default `prefill_chunks`) shares the token budget out."""

    def __init__(self, policy: AdmissionPolicy | None = None, kv_token_budget: int | None = None,
                 kv_policy: str = "reserve", max_num_tokens: int | None = None,
                 chunked_prefill: bool = False, prefix_cache: PrefixCache | None = None,
                 prefill_split: PrefillSplit = prefill_chunks) -> None:
        self.policy = policy if policy is not None else FCFSAdmission()
        self.kv_token_budget = math.inf if kv_token_budget is None else kv_token_budget
        self.reserve = choice("kv_policy", kv_policy, ("reserve", "on_demand")) == "reserve"
        self.max_num_tokens = math.inf if max_num_tokens is None else max_num_tokens
        if chunked_prefill and max_num_tokens is None:
            raise ValueError("chunked_prefill needs max_num_tokens (the per-iteration token budget)")
        self.chunked_prefill = bool(chunked_prefill)
        self.prefill_split = prefill_split  # chunked prefill's split (may be replaced between steps)
        self.prefix_cache = prefix_cache
        self.waiting: deque[GenerationRequest] = deque()
        self.running: list[GenerationRequest] = []
        self.kv_used = 0

    @property
    def has_work(self) -> bool:
        """True while anything waits or runs."""
        return bool(self.waiting) or bool(self.running)

    @property
    def n_decoding(self) -> int:
        """Running requests whose prompt is done: each decodes one token next step."""
        return sum(1 for r in self.running if r.prefilled == r.prefill_target)

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request; ValueError if the policy could never admit it."""
        if not self.reserve:
            request.reserved_tokens = request.prefill_target  # on demand: the prompt, for now
        self.policy.check(request)
        self.waiting.append(request)

    def schedule(self) -> StepPlan:
        """Plan one iteration: admit, evict if on-demand KV overflows, give each running request
        its work. Decodes come first (one token each); prompts share the tokens left."""
        admitted = self.admit()
        if not self.reserve:
            self.evict_until_fits()
        batch, decode, prefill = [], [], []
        prefill_tokens = context_tokens = useful_tokens = 0
        prefilling = [r for r in self.running if r.prefilled < r.prefill_target]
        remaining = [r.prefill_target - r.prefilled for r in prefilling]
        if self.chunked_prefill:
            # Chunked prefill (Sarathi-Serve, vLLM/TensorRT-LLM `max_num_tokens`) caps the tokens per
            # iteration: the decodes' tokens are taken first, the prompts share the rest in order
            # (`prefill_split`, by default `prefill_chunks`) and carry what is left to the next ones.
            chunks = self._split(remaining)
        else:
            # Whole prompts (Orca, vLLM's default before chunking): one long prefill stalls every
            # decode in the batch for its whole length.
            chunks = remaining
        chunk_of = dict(zip(prefilling, chunks))
        # Every running request advances in every iteration (Orca's iteration-level scheduling),
        # so nobody waits for the longest member of a batch as request-level batching does.
        for request in self.running:
            if request not in chunk_of:  # prompt done: one decode token, attending to its KV and itself
                decode.append(request)
                context_tokens += request.kv_tokens + 1
                if not self.reserve:  # on demand: the new token's KV slot is taken now
                    request.kv_allocated += 1
                    self.kv_used += 1
            else:
                chunk = chunk_of[request]
                if chunk == 0:
                    continue  # no tokens left this iteration: it waits for the next
                prefill.append((request, chunk))
                prefill_tokens += chunk
                if request.prefilled + chunk == request.prefill_target:  # its prompt completes: count new work
                    useful_tokens += 1 if request.recomputing else request.prompt_tokens
            batch.append(request)
        return StepPlan(admitted, batch, decode, prefill, prefill_tokens, context_tokens,
                        useful_tokens + len(decode), self.kv_used)

    def _split(self, remaining: list[int]) -> list[int]:
        """`prefill_split`'s chunks for prompts with `remaining` tokens left; ValueError when a replaced
        split returns chunks that do not fit those prompts or the budget the decodes leave."""
        room = max(0, self.max_num_tokens - self.n_decoding)
        chunks = [int(c) for c in self.prefill_split(list(remaining), self.n_decoding, self.max_num_tokens)]
        if len(chunks) != len(remaining) or sum(chunks) > room or any(
                not 0 <= c <= left for c, left in zip(chunks, remaining)):
            raise ValueError(f"prefill split {chunks} does not fit prompts with {remaining} tokens left "
                             f"and {room} tokens of room ({self.n_decoding} decodes, budget {self.max_num_tokens})")
        return chunks

    def admit(self) -> list[GenerationRequest]:
        """Ask the policy whom to admit (it holds the KV budget: each request claims its
        `reserved_tokens`), then, with whole prompts, keep them while the iteration's token
        budget holds their prompts; the first misfit stops it (nobody overtakes it)."""
        if not self.waiting:
            return []
        # The policy says who, in which order (FCFS up to max_active, vLLM's max_num_seqs, within
        # the KV budget by default; the labs write their own).
        chosen = sorted({int(i) for i in self.policy.admit(self.waiting, self.running)})
        if not chosen:
            return []
        if not 0 <= chosen[0] <= chosen[-1] < len(self.waiting):
            raise ValueError(f"admission policy returned an index outside the queue: {chosen}")
        admitted = [self.waiting[i] for i in chosen]
        if not self.chunked_prefill and self.max_num_tokens < math.inf:
            # tokens this iteration already carries: one per decode, plus the prompts in flight
            tokens = self.n_decoding + sum(r.prefill_target - r.prefilled for r in self.running)
            for n, request in enumerate(admitted):
                if tokens > 0 and tokens + request.prefill_target > self.max_num_tokens:
                    del admitted[n:]  # a whole prompt must fit (alone it may exceed the budget)
                    break
                tokens += request.prefill_target
        for request in admitted:  # the KV it claimed is now counted as held
            request.kv_allocated = request.reserved_tokens
            self.kv_used += request.kv_allocated
        self._take_from_queue(chosen[:len(admitted)])
        self.running.extend(admitted)
        return admitted

    def _take_from_queue(self, indices: list[int]) -> None:
        """Remove the admitted (sorted queue positions) from the waiting queue."""
        if indices == list(range(len(indices))):  # FCFS: a prefix of the queue
            for _ in indices:
                self.waiting.popleft()
        elif indices:
            drop = set(indices)
            self.waiting = deque(r for i, r in enumerate(self.waiting) if i not in drop)

    def match_prefixes(self) -> None:
        """Prefix caching, before `schedule()`: each waiting request starts from the KV of the longest
        run of its prompt's full blocks in the cache, so its prefill computes only the rest."""
        cache = self.prefix_cache
        if cache is None:
            return
        for request in self.waiting:
            # its last position is always computed: its logits give the next token
            usable = request.prefix_keys[:(request.prefill_target - 1) // cache.block_size]
            request.prefix_blocks = cache.match(usable)
            request.cached_tokens = len(request.prefix_blocks) * cache.block_size
            request.prefilled = request.kv_tokens = request.cached_tokens

    def cache_prefills(self, plan: StepPlan, block=None) -> None:
        """Prefix caching, after the execution and before `complete(plan)`: prompts whose prefill
        completes put their full blocks in the cache (`block(request, j)`: block j's KV, or None)."""
        if self.prefix_cache is None:
            return
        for request, chunk in plan.prefill:
            if request.prefix_keys and request.prefilled + chunk == request.prefill_target:
                self.prefix_cache.insert(request.prefix_keys,
                                         None if block is None else (lambda j, r=request: block(r, j)))

    def evict_until_fits(self) -> None:
        """On demand, each decode needs one more KV slot this step: while they do not fit, evict
        the newest running request (vLLM's recompute preemption) back to the queue's head."""
        # Reserving nothing ahead packs more sequences in (vLLM's PagedAttention, TensorRT-LLM's
        # max_utilization), at the risk that they outgrow the cache together; then the newest is
        # dropped and later recomputes its prompt and tokens so far: wasted work, lower η.
        while self.running:
            if self.kv_used + self.n_decoding <= self.kv_token_budget:
                return
            request = self.running.pop()
            self.kv_used -= request.kv_allocated
            request.kv_allocated = request.kv_tokens = request.prefilled = 0
            request.prefill_target = request.prompt_tokens + request.generated
            request.reserved_tokens = request.prefill_target  # what it claims to come back
            request.recomputing = request.generated > 0
            request.preemptions += 1
            self.waiting.appendleft(request)

    def complete(self, plan: StepPlan, stopped: Seq[GenerationRequest] = ()) -> list[GenerationRequest]:
        """After the execution: store the new KV, count the tokens, retire (and free) requests at
        max_tokens or in `stopped` (they produced <eos>). Returns the finished."""
        # Retiring at once is the point of iteration-level batching (Orca): the freed slot and
        # KV go to a waiting request at the very next step, not when the whole batch ends.
        finished = []
        decoding_next = []  # on demand, each will claim one more KV token next step
        for request in plan.decode:
            request.kv_tokens += 1
            request.generated += 1
            decoding_next.append(request)
        for request, chunk in plan.prefill:
            request.prefilled += chunk
            request.kv_tokens += chunk
            if request.prefilled == request.prefill_target:  # the last prompt position yields a token
                request.recomputing = False
                request.generated += 1
                decoding_next.append(request)
        for request in decoding_next:
            if request.generated >= request.max_tokens or request in stopped:
                finished.append(request)
            elif not self.reserve:
                request.reserved_tokens = request.kv_allocated + 1
        for request in finished:
            self.running.remove(request)
            self.kv_used -= request.kv_allocated
            request.kv_allocated = 0
        return finished

    def remove(self, request: GenerationRequest) -> None:
        """Drop a waiting or running request (cancelled) and free its KV."""
        if request in self.running:
            self.running.remove(request)
            self.kv_used -= request.kv_allocated
            request.kv_allocated = 0
        elif request in self.waiting:
            self.waiting.remove(request)


@dataclass
class StepReport:
    """What one step did: `emitted` (sequence, token) per sequence that produced a token (a prompt
    still part-way produces none), `admitted` with the prompt tokens each took from the prefix cache
    (`cached_tokens`), `preempted`, `finished`, waiting count and KV tokens held after it, blocks in
    the prefix cache, how many sequences it computed (`batch_size`) and its duration."""

    emitted: list[tuple[Sequence, int]] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    n_waiting: int = 0
    kv_tokens: int = 0
    prefix_blocks: int = 0
    batch_size: int = 0
    seconds: float = 0.0


class ContinuousBatcher:
    """`ContinuousScheduler` run on the real `ToyLM`: a waiting queue bounded by `max_waiting`,
    `step()` executes one planned iteration with `lm.generation.step_chunks` (prompt chunks, decodes,
    recomputes, prefix-cache hits exactly as planned). `submit` and `cancel` may be called from other
    threads. `kv_policy="on_demand"` holds the KV stored and evicts under the policy's
    `kv_token_budget`; "reserve" leaves the budget to the policy (ToyLM's cache has no hard limit)."""

    def __init__(self, lm: ToyLM, policy: AdmissionPolicy | None = None,
                 max_waiting: int | None = None, max_num_tokens: int | None = None,
                 chunked_prefill: bool = False, kv_policy: str = "reserve",
                 prefix_cache: PrefixCache | None = None) -> None:
        optional_count("max_waiting", max_waiting)
        optional_count("max_num_tokens", max_num_tokens)
        self.lm = lm
        self.max_waiting = max_waiting
        policy = policy if policy is not None else FCFSAdmission()
        budget = getattr(policy, "kv_token_budget", None) if kv_policy == "on_demand" else None
        self.scheduler = ContinuousScheduler(policy, budget, kv_policy, max_num_tokens, chunked_prefill,
                                             prefix_cache)
        self._requests: dict[int, GenerationRequest] = {}  # id(seq) -> its request
        self._lock = threading.Lock()
        self._in_step: set[int] = set()
        self._cancelled_in_step: list[tuple[Sequence, str]] = []

    @property
    def policy(self) -> AdmissionPolicy:
        """The admission policy (may be replaced between steps)."""
        return self.scheduler.policy

    @policy.setter
    def policy(self, policy: AdmissionPolicy) -> None:
        self.scheduler.policy = policy

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

    def submit(self, seq: Sequence) -> None:
        """Queue a sequence; ValueError if the policy could never admit it or the queue is full."""
        if seq.done:
            raise ValueError("cannot submit a finished sequence")
        request = GenerationRequest(seq.seq_id, int(seq.prompt.size), seq.max_tokens,
                                    seq.reserved_tokens, payload=seq, generated=len(seq.tokens))
        if self.scheduler.prefix_cache is not None:
            request.prefix_keys = block_keys(seq.prompt, self.scheduler.prefix_cache.block_size)
        self.scheduler.policy.check(request)
        with self._lock:
            if self.max_waiting is not None and self.n_waiting >= self.max_waiting:
                raise ValueError(f"queue full: {self.n_waiting} requests already wait "
                                 f"(max_waiting {self.max_waiting})")
            self.scheduler.submit(request)
            self._requests[id(seq)] = request

    def cancel(self, seq: Sequence, reason: str = "cancelled") -> None:
        """Drop a waiting or running sequence and free its cache (during a step, when it ends)."""
        with self._lock:
            if id(seq) in self._in_step:
                self._cancelled_in_step.append((seq, reason))
                return
            request = self._requests.pop(id(seq), None)
            if request is not None:
                self.scheduler.remove(request)
        seq.cancel(reason)

    def drain(self, reason: str = "shutdown") -> list[Sequence]:
        """Cancel everything; return the sequences that were waiting or running."""
        with self._lock:
            scheduler = self.scheduler
            dropped = [r.payload for r in list(scheduler.waiting) + scheduler.running]
            for request in list(scheduler.waiting) + scheduler.running:
                scheduler.remove(request)
            self._requests.clear()
        for s in dropped:
            s.cancel(reason)
        return dropped

    def step(self) -> StepReport:
        """Plan one iteration, run it on the LM (prompt chunks and decodes), retire."""
        report = StepReport()
        t0 = time.perf_counter()
        with self._lock:
            plan = self._plan(report)
            batch = [r.payload for r in plan.batch]
            self._in_step = {id(s) for s in batch}
        if batch:
            chunks = {id(r): n for r, n in plan.prefill}
            try:
                tokens = step_chunks(self.lm, batch, [chunks.get(id(r), 1) for r in plan.batch])
            finally:
                with self._lock:
                    self._in_step = set()
                    cancelled, self._cancelled_in_step = self._cancelled_in_step, []
            with self._lock:
                cache = self.scheduler.prefix_cache
                if cache is not None:  # prompts completed now: their full blocks' KV is cached
                    self.scheduler.cache_prefills(plan, lambda r, j: kv_block(r.payload.cache, j, cache.block_size))
                    report.prefix_blocks = len(cache)
                stopped = [r for r in plan.batch if r.payload.done]  # <eos> before max_tokens
                finished = {id(r.payload) for r in self.scheduler.complete(plan, stopped)}
                for s in batch:
                    if id(s) in finished:
                        self._requests.pop(id(s), None)
                        s.release()
            for s, reason in cancelled:
                self.cancel(s, reason)
            gone = {id(s) for s, _ in cancelled}
            report.batch_size = len(batch)
            report.emitted = [(s, t) for s, t in zip(batch, tokens) if t is not None and id(s) not in gone]
            report.finished = [s for s, _ in report.emitted if id(s) in finished]
            with self._lock:
                report.kv_tokens = sum(s.cache.length for s in self.active if s.cache is not None)
        report.seconds = time.perf_counter() - t0
        return report

    def _plan(self, report: StepReport) -> StepPlan:
        """Schedule (under the lock); drop the KV of the evicted, load prefix-cache hits into the admitted."""
        scheduler = self.scheduler
        before = list(scheduler.running)
        scheduler.match_prefixes()
        plan = scheduler.schedule()
        running = {id(r) for r in scheduler.running}
        report.preempted = [r.payload for r in before if id(r) not in running]
        for s in report.preempted:
            s.cache = None  # recompute preemption: its KV is dropped, recomputed when readmitted
        for request in plan.admitted:
            if request.prefix_blocks:
                load_blocks(request.payload.ensure_cache(self.lm), request.prefix_blocks)
                request.prefix_blocks = []
        report.admitted = [r.payload for r in plan.admitted]
        report.cached_tokens = [r.cached_tokens for r in plan.admitted]
        report.n_waiting = self.n_waiting
        return plan
