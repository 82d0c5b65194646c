"""Continuous (iteration-level) batching, as in Orca, vLLM and TensorRT-LLM's in-flight batching.

A thin driver around `batchlab.lm.scheduler.ContinuousScheduler` (the same step `lm_stream` runs):
before each iteration it admits waiting requests FCFS (``max_active``, KV budget); an iteration
decodes one token per sequence past its prompt and computes prompt tokens for the others (whole, or
chunked to ``max_num_tokens``); the cost model prices it instead of running a model. KV of p prompt
+ o output tokens peaks at p + o - 1: ``kv_policy="reserve"`` admits only when that fits;
``"on_demand"`` admits when the prompt fits and evicts the newest sequence when a step does not
(recomputed later, counted as waste in η). With ``prefix_cache_blocks``, request i's prompt starts
with the first ``shared_prefix_tokens[i]`` tokens of one common prompt; full blocks of it already
cached are not prefilled (`lm.prefix_cache`, the same cache `lm_stream` runs).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, times_array
from batchlab.lm.prefix_cache import BLOCK_SIZE, PrefixCache
from batchlab.lm.scheduler import ContinuousScheduler, FCFSAdmission, GenerationRequest
from .results import SimResult, empty_records, make_batches
from .service import TokenCost

#: columns of `SimResult.batches` filled from each iteration's row, in order
_ITERATION_COLUMNS = ("start", "end", "size", "prefill_tokens", "decode_seqs", "useful_tokens",
                      "executed_tokens", "kv_tokens")


def simulate_continuous(
    arrivals: np.ndarray | Sequence[float],
    prompt_tokens: np.ndarray | Sequence[int],
    output_tokens: np.ndarray | Sequence[int],
    cost: TokenCost,
    max_active: int,
    kv_budget_tokens: int | None = None,
    chunked_prefill: bool = False,
    max_num_tokens: int | None = None,
    kv_policy: str = "reserve",
    shared_prefix_tokens: np.ndarray | Sequence[int] | None = None,
    prefix_cache_blocks: int | None = None,
    block_size: int = BLOCK_SIZE,
    warmup: float = 0.1,
) -> SimResult:
    """Simulate iteration-level batching of generation requests on one engine, ``cost`` pricing each pass.

    ``max_num_tokens`` caps the tokens per iteration (required with ``chunked_prefill``); without
    chunking a prompt is admitted only if it fits whole (a recomputation may exceed it alone).
    """
    a = times_array("arrivals", arrivals)
    p = int_array("prompt_tokens", prompt_tokens, a.size, lo=1)
    o = int_array("output_tokens", output_tokens, a.size, lo=1)
    if not isinstance(cost, TokenCost):
        raise ValueError(f"cost must be a TokenCost, got {type(cost).__name__}")
    max_active = integer("max_active", max_active, lo=1)
    policy = choice("kv_policy", kv_policy, ("reserve", "on_demand"))
    budget = None if kv_budget_tokens is None else integer("kv_budget_tokens", kv_budget_tokens, lo=1)
    token_cap = None if max_num_tokens is None else integer("max_num_tokens", max_num_tokens, lo=1)
    _check_fits(p, o, budget, token_cap, chunked_prefill)
    if shared_prefix_tokens is not None and prefix_cache_blocks is None:
        raise ValueError("shared_prefix_tokens needs prefix_cache_blocks (the prefix cache's capacity)")
    cache = None if prefix_cache_blocks is None else PrefixCache(prefix_cache_blocks, block_size)
    shared = np.zeros_like(p) if shared_prefix_tokens is None else \
        int_array("shared_prefix_tokens", shared_prefix_tokens, a.size, lo=0)
    # FCFS within max_active and the KV budget; on demand the scheduler evicts under the same budget
    scheduler = ContinuousScheduler(FCFSAdmission(max_active, kv_token_budget=budget), budget, policy,
                                    token_cap, chunked_prefill, cache)
    records, rows, cached = _run(scheduler, a, p, o, cost, shared)
    batches = make_batches(len(rows))
    if rows:
        for name, column in zip(_ITERATION_COLUMNS, zip(*rows)):
            batches[name] = column
        batches["executed"] = batches["size"]
        batches["instance"] = 0
    config = dict(max_active=max_active, kv_budget_tokens=kv_budget_tokens, chunked_prefill=chunked_prefill,
                  max_num_tokens=max_num_tokens, kv_policy=policy, cost=repr(cost))
    extra = {"eta": "tokens", "kv": True, "tokens": True,
             "summary_extra": {"preemptions": int(np.sum(records["preemptions"]))}}
    if cache is not None:  # prompt tokens each request last took from the cache, and their sum
        config.update(prefix_cache_blocks=prefix_cache_blocks, block_size=block_size)
        extra["cached_tokens"] = cached
        extra["summary_extra"]["prefix_hit_tokens"] = int(cached.sum())
    return SimResult(records, batches, "continuous", config, instances=1, capacity_rps=None, warmup=warmup,
                     extra=extra)


def _check_fits(p: np.ndarray, o: np.ndarray, budget: int | None, token_cap: int | None,
                chunked_prefill: bool) -> None:
    """ValueError for settings no request could ever run under."""
    if chunked_prefill and token_cap is None:
        raise ValueError("chunked_prefill needs max_num_tokens (the per-iteration token budget)")
    need_peak = p + o - 1  # a sequence's KV peak, whatever the policy (alone it must fit)
    if p.size and budget is not None and int(need_peak.max()) > budget:
        j = int(np.argmax(need_peak))
        raise ValueError(f"request {j} needs {int(need_peak[j])} KV tokens, more than kv_budget_tokens={budget}")
    if p.size and not chunked_prefill and token_cap is not None and int(p.max()) > token_cap:
        raise ValueError(f"a prompt of {int(p.max())} tokens exceeds max_num_tokens={token_cap}; use chunked_prefill")


def _requests(p: np.ndarray, o: np.ndarray, shared: np.ndarray, block_size: int | None) -> list[GenerationRequest]:
    """One request per arrival; the simulator knows each output length, so a request reserves
    exactly its KV peak. With a prefix cache, its block keys: the common prompt's, then its own."""
    requests = [GenerationRequest(i, prompt, out, reserved_tokens=prompt + out - 1)
                for i, (prompt, out) in enumerate(zip(p.tolist(), o.tolist()))]
    if block_size is not None:
        for r, s in zip(requests, shared.tolist()):
            common = min(s, r.prompt_tokens) // block_size
            r.prefix_keys = tuple(("shared", j) if j < common else (r.seq_id, j)
                                  for j in range(r.prompt_tokens // block_size))
    return requests


def _run(scheduler: ContinuousScheduler, arrivals: np.ndarray, p: np.ndarray, o: np.ndarray,
         cost: TokenCost, shared: np.ndarray) -> tuple[np.ndarray, list[tuple], np.ndarray]:
    """The event loop: submit arrivals, let the scheduler plan an iteration, price it, advance the
    clock, complete it; returns the per-request records, one row per iteration and the prompt
    tokens each request last took from the prefix cache."""
    n = arrivals.size
    cache = scheduler.prefix_cache
    requests = _requests(p, o, shared, None if cache is None else cache.block_size)
    records = empty_records(n)
    records["arrival"] = arrivals
    start, first_token, finish = records["start"], records["first_token"], records["finish"]
    batch_id = records["batch_id"]
    arrival_times = arrivals.tolist()
    rows: list[tuple] = []
    now = 0.0
    next_arrival = 0
    while True:
        while next_arrival < n and arrival_times[next_arrival] <= now:
            scheduler.submit(requests[next_arrival])
            next_arrival += 1
        if not scheduler.has_work:
            if next_arrival >= n:
                break
            now = arrival_times[next_arrival]  # idle: jump to the next arrival
            continue
        scheduler.match_prefixes()
        plan = scheduler.schedule()
        if not plan.batch:
            raise RuntimeError("continuous batching made no progress (budget settings leave no room)")
        end = now + cost.iteration_time(plan.prefill_tokens, len(plan.decode), plan.context_tokens)
        for request in plan.admitted:
            if batch_id[request.seq_id] < 0:  # its first admission (not a readmission after eviction)
                start[request.seq_id] = now
                batch_id[request.seq_id] = len(rows)
        # a prompt's tokens taken from the prefix cache were not computed: not useful work of this step
        useful = plan.useful_tokens - sum(r.cached_tokens for r, chunk in plan.prefill
                                          if r.prefilled + chunk == r.prefill_target and not r.recomputing)
        scheduler.cache_prefills(plan)
        finished = scheduler.complete(plan)
        for request, _ in plan.prefill:
            if request.generated and first_token[request.seq_id] != first_token[request.seq_id]:
                first_token[request.seq_id] = end  # NaN until its first prompt pass completes
        for request in finished:
            finish[request.seq_id] = end
        rows.append((now, end, len(plan.batch), plan.prefill_tokens, len(plan.decode), useful,
                     plan.prefill_tokens + len(plan.decode), plan.kv_tokens))
        now = end
    records["instance"] = 0
    records["prompt_tokens"] = p
    records["output_tokens"] = o
    records["preemptions"] = [r.preemptions for r in requests]
    return records, rows, np.array([r.cached_tokens for r in requests])
