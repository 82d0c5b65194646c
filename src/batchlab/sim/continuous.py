"""Continuous (iteration-level) batching, as in Orca, vLLM and TensorRT-LLM's in-flight batching.

A thin driver around `batchlab.batching.Scheduler` (the same step `lm_stream` runs): it submits the
arrivals, lets the scheduler plan each step over a `BlockManager` (the KV pool as blocks, no
storage), prices the step with the cost model instead of running a model, and completes it. A step
decodes one token per sequence past its prompt and computes prompt tokens for the others, shaped by
``step_policy`` ("prefill_first", "mixed" whole prompts, or "chunked" to ``max_num_tokens``).
``kv_policy="reserve"`` holds a request's prompt + output blocks from its start; ``"on_demand"``
takes blocks as it grows and preempts the newest request when the pool runs out (recomputed later,
counted as waste in η). With ``prefix_caching``, request i's prompt starts with the first
``shared_prefix_tokens[i]`` tokens of one common prompt, and its full blocks already cached are
shared, not prefilled.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, times_array
from batchlab.batching.blocks import BLOCK_SIZE, BlockManager
from batchlab.batching.policies import ADMISSION, STEP_POLICIES
from batchlab.batching.request import GenerationRequest
from batchlab.batching.scheduler import Scheduler
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
    kv_token_budget: int | None = None,
    step_policy: str = "mixed",
    max_num_tokens: int | None = None,
    kv_policy: str = "reserve",
    shared_prefix_tokens: np.ndarray | Sequence[int] | None = None,
    prefix_caching: bool = False,
    block_size: int = BLOCK_SIZE,
    warmup: float = 0.1,
    record_token_times: bool = False,
) -> SimResult:
    """Simulate iteration-level batching of generation requests on one engine, ``cost`` pricing each step.

    ``kv_token_budget`` sizes the KV pool (``kv_token_budget // block_size`` blocks; None: unlimited);
    ``max_num_tokens`` caps the positions per step (required with ``step_policy="chunked"``; with whole
    prompts a prompt must fit in it). ``record_token_times``: ``extra["token_times"]`` holds, per
    request, the end of every step that gave it a token (its ITLs).
    """
    a = times_array("arrivals", arrivals)
    p = int_array("prompt_tokens", prompt_tokens, a.size, lo=1)
    o = int_array("output_tokens", output_tokens, a.size, lo=1)
    if not isinstance(cost, TokenCost):
        raise ValueError(f"cost must be a TokenCost, got {type(cost).__name__}")
    max_active = integer("max_active", max_active, lo=1)
    policy = choice("kv_policy", kv_policy, tuple(ADMISSION))
    steps = choice("step_policy", step_policy, tuple(STEP_POLICIES))
    block_size = integer("block_size", block_size, lo=1)
    budget = None if kv_token_budget is None else integer("kv_token_budget", kv_token_budget, lo=block_size)
    token_cap = None if max_num_tokens is None else integer("max_num_tokens", max_num_tokens, lo=1)
    _check_fits(p, o, budget, block_size, token_cap, steps)
    if shared_prefix_tokens is not None and not prefix_caching:
        raise ValueError("shared_prefix_tokens needs prefix_caching=True")
    shared = np.zeros_like(p) if shared_prefix_tokens is None else \
        int_array("shared_prefix_tokens", shared_prefix_tokens, a.size, lo=0)
    blocks = BlockManager(None if budget is None else budget // block_size, block_size, prefix_caching)
    scheduler = Scheduler(blocks, ADMISSION[policy](), max_active, token_cap, steps)
    requests = _requests(p, o, shared, prefix_caching)
    records, rows, times = _run(scheduler, requests, a, cost, record_token_times)
    config = dict(max_active=max_active, kv_token_budget=kv_token_budget, step_policy=steps,
                  max_num_tokens=max_num_tokens, kv_policy=policy, block_size=block_size,
                  prefix_caching=bool(prefix_caching), cost=repr(cost))
    return _result(records, rows, times if record_token_times else None, requests, blocks, config, warmup)


def _result(records: np.ndarray, rows: list[tuple], times: list[list[float]] | None,
            requests: list[GenerationRequest], blocks: BlockManager, config: dict, warmup: float) -> SimResult:
    """The `SimResult`: one batch row per step; extra: what each request found in the prefix cache and
    recomputed, the pool's peak blocks, and (`times`) each request's token times."""
    batches = make_batches(len(rows))
    if rows:
        for name, column in zip(_ITERATION_COLUMNS, zip(*rows)):
            batches[name] = column
        batches["executed"] = batches["size"]
        batches["instance"] = 0
    cached = np.array([r.cached_tokens for r in requests])
    recomputed = np.array([r.recomputed_tokens for r in requests])
    extra = {"eta": "tokens", "kv": True, "tokens": True, "cached_tokens": cached, "recomputed_tokens": recomputed,
             "peak_kv_blocks": blocks.peak_used,
             "summary_extra": {"preemptions": int(np.sum(records["preemptions"])),
                               "recomputed_tokens": int(recomputed.sum())}}
    if config["prefix_caching"]:  # prompt tokens each request last found in the cache, and their sum
        extra["summary_extra"]["prefix_hit_tokens"] = int(cached.sum())
    if times is not None:
        extra["token_times"] = times
    return SimResult(records, batches, "continuous", config, instances=1, capacity_rps=None, warmup=warmup,
                     extra=extra)


def _check_fits(p: np.ndarray, o: np.ndarray, budget: int | None, block_size: int, token_cap: int | None,
                step_policy: str) -> None:
    """ValueError for settings no request could ever run under."""
    if step_policy == "chunked" and token_cap is None:
        raise ValueError("step_policy='chunked' needs max_num_tokens (the per-step token budget)")
    need = -(-(p + o) // block_size)  # blocks of prompt + output (what reserve holds; on demand peaks there)
    if p.size and budget is not None and int(need.max()) > budget // block_size:
        j = int(np.argmax(need))
        raise ValueError(f"request {j} needs {int(p[j] + o[j])} KV tokens ({int(need[j])} blocks of {block_size}), "
                         f"more than kv_token_budget={budget} holds")
    if p.size and step_policy != "chunked" and token_cap is not None and int(p.max()) > token_cap:
        raise ValueError(f"a prompt of {int(p.max())} tokens exceeds max_num_tokens={token_cap}; "
                         "use step_policy='chunked'")


def _requests(p: np.ndarray, o: np.ndarray, shared: np.ndarray, prefix_caching: bool) -> list[GenerationRequest]:
    """One request per arrival. With prefix caching its token ids stand in for real ones: the common
    prompt's positions 0, 1, … for its shared part, then its own id (negative) for the rest (so only
    the shared part's blocks match); without, placeholders."""
    requests = []
    for i, (prompt, out, s) in enumerate(zip(p.tolist(), o.tolist(), shared.tolist())):
        s = min(s, prompt) if prefix_caching else 0
        tokens = list(range(s)) + [~i] * (prompt - s) if prefix_caching else [0] * prompt
        requests.append(GenerationRequest(i, tokens, out))
    return requests


def _run(scheduler: Scheduler, requests: list[GenerationRequest], arrivals: np.ndarray, cost: TokenCost,
         record_token_times: bool) -> tuple[np.ndarray, list[tuple], list[list[float]]]:
    """The event loop: submit arrivals, let the scheduler plan a step, price it, advance the clock,
    complete it; returns the per-request records, one row per step and each request's token times."""
    n = arrivals.size
    nan = float("nan")
    start, first_token, finish, batch_id = [nan] * n, [nan] * n, [nan] * n, [-1] * n
    arrival_times = arrivals.tolist()
    times: list[list[float]] = [[] for _ in range(n)]
    rows: list[tuple] = []
    now, next_arrival, bs = 0.0, 0, scheduler.blocks.block_size
    while True:
        while next_arrival < n and arrival_times[next_arrival] <= now:
            scheduler.submit(requests[next_arrival])
            next_arrival += 1
        if not scheduler.has_work:
            if next_arrival >= n:
                break
            now = arrival_times[next_arrival]  # idle: jump to the next arrival
            continue
        plan = scheduler.schedule()
        if not plan.work:
            raise RuntimeError("continuous batching made no progress (budget settings leave no room)")
        end = now + cost.iteration_time(plan.prefill_tokens, len(plan.decode), plan.context_tokens)
        for request in plan.admitted:
            if batch_id[request.seq_id] < 0:  # its first admission (not a readmission after preemption)
                start[request.seq_id], batch_id[request.seq_id] = now, len(rows)
        sampling = [r.seq_id for r, k in plan.work if r.computed + k == len(r.token_ids)]
        for request in scheduler.complete(plan, [~r.seq_id for r, _ in plan.work]):  # stand-in token ids
            finish[request.seq_id] = end
        for i in sampling:
            if first_token[i] != first_token[i]:  # NaN until its first prompt pass completes
                first_token[i] = end
            if record_token_times:
                times[i].append(end)
        rows.append((now, end, len(plan.work), plan.prefill_tokens, len(plan.decode), plan.useful_tokens,
                     plan.tokens, plan.kv_blocks * bs))
        now = end
    records = empty_records(n)
    records["arrival"] = arrivals
    records["start"], records["first_token"], records["finish"], records["batch_id"] = start, first_token, finish, batch_id
    records["instance"] = 0
    records["prompt_tokens"] = [r.prompt_tokens for r in requests]
    records["output_tokens"] = [r.max_tokens for r in requests]
    records["preemptions"] = [r.preemptions for r in requests]
    return records, rows, times
