"""Continuous (iteration-level) batching's step, written once, as vLLM V1 and nano-vllm schedule it
(vLLM ``v1/core/sched/scheduler.py``; nano-vllm ``engine/scheduler.py``).

`Scheduler.schedule()` plans one step: the running requests first, in order (a decode needs one
token, a prompt part-way its next chunk), then the waiting ones first come, first served while the
batch, the step's token budget and the KV blocks last. A request runs only if it gets at least one
token. When a running request cannot get its blocks, the last running request is preempted: its
blocks are freed and it goes back to the head of the queue, to be recomputed (hitting whatever of
it is still cached); no request is admitted in a step that preempted. Every KV question goes to the
`BlockManager`. The caller executes the plan (the real LM, or a cost model) and calls `complete`.
Speculative decoding: a decoding request with `draft` tokens computes its last token and the drafts
in one step, each counted against the budget; `complete` keeps the accepted ones and rolls back the rest.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Iterator, Sequence

from batchlab._validate import choice, count
from .blocks import BlockManager
from .policies import STEP_POLICIES, AdmissionPolicy, ReserveAdmission
from .request import GenerationRequest, StepPlan

#: lm_stream's defaults (config parameters of the same names): sequences in a step (vLLM's
#: max_num_seqs), the KV pool in tokens (pool blocks = budget / block_size), requests that may wait.
MAX_ACTIVE = 8
KV_TOKEN_BUDGET = 4096
MAX_WAITING = 256


class Scheduler:
    """The continuous-batching step over one `BlockManager`: `schedule()` plans, the caller runs the
    plan, `complete(plan, sampled)` records the tokens and retires the finished. `max_num_tokens`
    (None: no budget) caps the positions per step; `step_policy` names the step's shape
    (`STEP_POLICIES`); `prefill_split` may be replaced between steps (a lab writes its own)."""

    def __init__(self, blocks: BlockManager, admission: AdmissionPolicy | None = None,
                 max_active: int = MAX_ACTIVE, max_num_tokens: int | None = None,
                 step_policy: str = "mixed") -> None:
        self.blocks = blocks
        self.admission = admission if admission is not None else ReserveAdmission()
        self.max_active = count("max_active", max_active)
        self.max_num_tokens = math.inf if max_num_tokens is None else count("max_num_tokens", max_num_tokens)
        self.step_policy = choice("step_policy", step_policy, tuple(STEP_POLICIES))
        if self.step_policy == "chunked" and max_num_tokens is None:
            raise ValueError("step_policy='chunked' needs max_num_tokens (the per-step token budget)")
        self.prefill_split, self.mixes_decodes = STEP_POLICIES[self.step_policy]
        self.waiting: deque[GenerationRequest] = deque()
        self.running: list[GenerationRequest] = []

    @property
    def has_work(self) -> bool:
        """True while anything waits or runs."""
        return bool(self.waiting) or bool(self.running)

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request; ValueError if the whole pool could not hold it."""
        need = self.blocks.blocks_for(request.reserved_tokens)
        if self.blocks.num_blocks is not None and need > self.blocks.num_blocks:
            raise ValueError(f"request needs {request.reserved_tokens} KV tokens (prompt + max_tokens, "
                             f"{need} blocks); the pool holds {self.blocks.num_blocks} blocks")
        self.waiting.append(request)

    def schedule(self) -> StepPlan:
        """Plan one step. Prefill-first (vLLM V0, nano-vllm) first tries a step of waiting prompts
        only; the others schedule the running requests, then, unless that preempted, the waiting."""
        plan = StepPlan()
        if not self.mixes_decodes:
            self._schedule_waiting(plan)
        if not plan.work:
            self._schedule_running(plan)
            if self.mixes_decodes and not plan.preempted:
                self._schedule_waiting(plan)
        plan.kv_blocks = self.blocks.num_used
        return plan

    def _schedule_running(self, plan: StepPlan) -> None:
        """Running requests in order; one whose blocks do not fit preempts the last running request
        (which may be itself) until they do."""
        decoding = [r.generated > 0 and r.computed + 1 == len(r.token_ids) for r in self.running]
        verified = sum(1 + len(r.draft) for r, d in zip(self.running, decoding) if d)  # decodes and drafts
        chunks = self._split([r.left for r, d in zip(self.running, decoding) if not d], verified)
        i = 0
        while i < len(self.running):
            request = self.running[i]
            if decoding[i]:  # its last token, then its draft tokens while the budget lasts
                n = int(min(1 + len(request.draft), max(0, self.max_num_tokens - plan.tokens)))
                del request.draft[max(n - 1, 0):]
            else:
                n = chunks.pop(0)
            if n == 0:
                i += 1
                continue
            while not self._grow(request, n):
                victim = self.running.pop()
                self._preempt(victim, plan)
                if victim is request:
                    break
            else:
                plan.add(request, n, decoding[i])
                i += 1

    def _schedule_waiting(self, plan: StepPlan) -> None:
        """Waiting requests in the policy's order while the batch, the budget and the blocks last; the
        first that does not fit stops the rest (nobody overtakes it)."""
        if not self.waiting or len(self.running) >= self.max_active:
            return
        n_decoding = plan.tokens - plan.prefill_tokens  # the decodes' positions (drafts included)
        lefts = [n for r, n in plan.prefill]
        started = []
        for i in self._selected():
            if len(self.running) >= self.max_active:
                break
            request = self.waiting[i]
            hits = self.blocks.cached_prefix(request.table, request.token_ids)
            hit_tokens = len(hits) * self.blocks.block_size
            n = self._split(lefts + [request.left - hit_tokens], n_decoding)[-1]
            if plan.work:  # never past the budget (a split need not give the earlier prompts the same again)
                n = min(n, max(0, self.max_num_tokens - plan.tokens))
            if n == 0 or not self._start(request, hits, n):
                break
            lefts.append(n)
            started.append(i)
            self.running.append(request)
            plan.admitted.append(request)
            plan.add(request, n, request.decoding)
        for i in sorted(started, reverse=True):
            del self.waiting[i]

    def _selected(self) -> Iterator[int]:
        """The admission policy's choice of waiting requests, each once (ValueError for an index
        off the queue)."""
        seen = set()
        for i in self.admission.select(self.waiting, self.running):
            i = int(i)
            if not 0 <= i < len(self.waiting):
                raise ValueError(f"admission policy returned index {i}, outside the queue of {len(self.waiting)}")
            if i not in seen:
                seen.add(i)
                yield i

    def _split(self, remaining: list[int], n_decoding: int) -> list[int]:
        """`prefill_split`'s chunks for prompts with `remaining` positions left; ValueError when a
        replaced split returns chunks that do not fit those prompts or the room the decodes leave."""
        if not remaining:
            return []
        room = max(0, self.max_num_tokens - n_decoding)
        chunks = [int(c) for c in self.prefill_split(list(remaining), n_decoding, self.max_num_tokens)]
        alone = n_decoding == 0 and len(chunks) > 0 and sum(chunks[1:]) == 0
        if len(chunks) != len(remaining) or (sum(chunks) > room and not alone) or any(
                not 0 <= c <= left for c, left in zip(chunks, remaining)):
            raise ValueError(f"prefill split {chunks} does not fit prompts with {remaining} tokens left "
                             f"and {room} tokens of room ({n_decoding} decodes, budget {self.max_num_tokens})")
        return chunks

    def _grow(self, request: GenerationRequest, n: int) -> bool:
        """Give a running request the blocks for its next `n` positions, if the pool has them."""
        need = self.admission.kv_tokens(request, n)
        return self.blocks.allocate(request.table, need, request.token_ids, request.computed + n)

    def _start(self, request: GenerationRequest, hits: list[int], n: int) -> bool:
        """Admit a waiting request: share its cached prefix blocks, take blocks for its first `n`."""
        cached = len(hits) * self.blocks.block_size
        request.computed = cached
        need = self.admission.kv_tokens(request, n)
        if not self.blocks.allocate(request.table, need, request.token_ids, cached + n, hits):
            request.computed = 0
            return False
        request.cached_tokens = cached
        request.high_water = max(request.high_water, cached)
        return True

    def _preempt(self, request: GenerationRequest, plan: StepPlan) -> None:
        """Recompute preemption (vLLM's default): free its blocks (its full ones stay cached until
        evicted) and put it at the head of the queue."""
        self.blocks.free(request.table)
        request.computed = 0
        request.draft.clear()
        request.preemptions += 1
        plan.preempted.append(request)
        self.waiting.appendleft(request)

    def complete(self, plan: StepPlan, sampled: Sequence[int | list[int] | None],
                 stopped: Sequence[GenerationRequest] = ()) -> list[GenerationRequest]:
        """After the execution: each request stored its `n` positions; one whose input is all computed
        appends the token it sampled (`sampled[i]`, aligned with `plan.work`; after draft tokens, the
        list of the accepted ones and the target's own token); those at max_tokens or in `stopped`
        (they sampled <eos>) leave and free their blocks. Returns the finished."""
        # Retiring at once is the point of iteration-level batching (Orca): the freed blocks and
        # place go to a waiting request at the very next step, not when a whole batch ends.
        finished = []
        for (request, n), token in zip(plan.work, sampled, strict=True):
            request.computed += n
            if request.computed > request.high_water:
                request.high_water = request.computed
            if request.computed < len(request.token_ids):
                continue  # a prompt part-way: no token yet
            *accepted, token = token if isinstance(token, list) else [token]
            if request.draft:
                self._keep_accepted(request, accepted)
            request.token_ids.append(token)
            request.generated += 1
            if request.generated >= request.max_tokens or request in stopped:
                finished.append(request)
        for request in finished:
            self.remove(request)
        return finished

    def _keep_accepted(self, request: GenerationRequest, accepted: list[int]) -> None:
        """After verifying draft tokens: the accepted ones join the request's tokens; the rejected
        positions' KV is rolled back (their blocks, unless the admission holds them)."""
        if accepted != request.draft[:len(accepted)]:
            raise ValueError(f"accepted tokens {accepted} are not a prefix of the draft {request.draft}")
        request.drafted, request.accepted = request.drafted + len(request.draft), request.accepted + len(accepted)
        request.draft = []
        request.token_ids += accepted
        self.rollback(request, len(request.token_ids))

    def remove(self, request: GenerationRequest) -> None:
        """Drop a waiting or running request (finished or cancelled) and free its blocks."""
        if request in self.running:
            self.running.remove(request)
            self.blocks.free(request.table)
        elif request in self.waiting:
            self.waiting.remove(request)

    def rollback(self, request: GenerationRequest, n_tokens: int) -> None:
        """Keep a running request's first `n_tokens` tokens and at most their KV (positions of draft
        tokens the target rejected): its table gives back the blocks past them that the admission
        policy does not hold (reserve keeps its whole reservation); the caller then appends the
        token the target chose."""
        if request not in self.running or not request.prompt_tokens <= n_tokens <= len(request.token_ids):
            raise ValueError(f"cannot roll request {request.seq_id!r} back to {n_tokens} tokens "
                             f"(it runs: {request in self.running}; prompt {request.prompt_tokens}, "
                             f"{len(request.token_ids)} tokens)")
        request.computed = min(request.computed, n_tokens)
        request.high_water = min(request.high_water, n_tokens)
        self.blocks.truncate(request.table, request.computed, self.admission.kv_tokens(request, 0))
        del request.token_ids[n_tokens:]
        request.generated = n_tokens - request.prompt_tokens
