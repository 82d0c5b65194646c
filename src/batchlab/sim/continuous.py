"""Continuous (iteration-level) batching, as in Orca, vLLM and TensorRT-LLM's in-flight batching.

Before each iteration the engine admits waiting requests FCFS (``max_active``, KV budget); an
iteration decodes one token per sequence past its prompt and computes prompt tokens for the others
(whole, or chunked to ``max_num_tokens``). KV of p prompt + o output tokens peaks at p + o - 1:
``kv_policy="reserve"`` admits only when that fits; ``"on_demand"`` admits when the prompt fits and
evicts the newest sequence when a step does not (recomputed later, counted as waste in η).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

import numpy as np

from batchlab._validate import choice, integer, int_array, times_array
from .engine import INF
from .results import SimResult, empty_records, make_batches
from .service import TokenCost


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
    warmup: float = 0.1,
) -> SimResult:
    """Simulate iteration-level batching of generation requests on one engine, ``cost`` pricing each pass.

    ``max_num_tokens`` caps the tokens per iteration (required with ``chunked_prefill``); without
    chunking a prompt is admitted only if it fits whole (a recomputation may exceed it alone).
    """
    a = times_array("arrivals", arrivals)
    n = a.size
    p = int_array("prompt_tokens", prompt_tokens, n, lo=1)
    o = int_array("output_tokens", output_tokens, n, lo=1)
    if not isinstance(cost, TokenCost):
        raise ValueError(f"cost must be a TokenCost, got {type(cost).__name__}")
    max_active = integer("max_active", max_active, lo=1)
    policy = choice("kv_policy", kv_policy, ("reserve", "on_demand"))
    budget = INF if kv_budget_tokens is None else integer("kv_budget_tokens", kv_budget_tokens, lo=1)
    tok_cap = INF if max_num_tokens is None else integer("max_num_tokens", max_num_tokens, lo=1)
    if chunked_prefill and max_num_tokens is None:
        raise ValueError("chunked_prefill needs max_num_tokens (the per-iteration token budget)")
    need_peak = p + o - 1  # a sequence's KV peak, whatever the policy (alone it must fit)
    if n and budget < INF and int(need_peak.max()) > budget:
        j = int(np.argmax(need_peak))
        raise ValueError(f"request {j} needs {int(need_peak[j])} KV tokens, more than kv_budget_tokens={budget}")
    if n and not chunked_prefill and tok_cap < INF and int(p.max()) > tok_cap:
        raise ValueError(f"a prompt of {int(p.max())} tokens exceeds max_num_tokens={tok_cap}; use chunked_prefill")

    al, pl, ol = a.tolist(), p.tolist(), o.tolist()
    reserve = policy == "reserve"
    gen = [0] * n            # output tokens produced so far
    target = pl[:]           # prompt positions the current prefill must compute
    done = [0] * n           # of which computed
    kvlen = [0] * n          # KV tokens stored
    alloc = [0] * n          # KV tokens allocated
    recompute = [False] * n
    preempt = [0] * n
    start = [math.nan] * n
    first = [math.nan] * n
    finish = [math.nan] * n
    bid = [-1] * n
    it_rows: list[tuple[float, float, int, int, int, int, int, int]] = []
    running: list[int] = []
    waiting: deque[int] = deque()
    kv_used = 0
    t = 0.0
    i = 0
    it = 0

    def evict(r: int) -> None:
        nonlocal kv_used
        running.remove(r)
        kv_used -= alloc[r]
        alloc[r] = 0
        kvlen[r] = 0
        done[r] = 0
        target[r] = pl[r] + gen[r]
        recompute[r] = gen[r] > 0
        preempt[r] += 1
        waiting.appendleft(r)

    while True:
        while i < n and al[i] <= t:
            waiting.append(i)
            i += 1
        if not running and not waiting:
            if i >= n:
                break
            t = al[i]
            continue
        n_dec = sum(1 for r in running if done[r] == target[r])
        tokens = n_dec + (0 if chunked_prefill else sum(target[r] - done[r] for r in running if done[r] < target[r]))
        growth = 0 if reserve else n_dec
        while waiting and len(running) < max_active:
            r = waiting[0]
            need = (pl[r] + ol[r] - 1) if reserve else target[r]
            if kv_used + need + growth > budget:
                break
            if not chunked_prefill and tokens + target[r] > tok_cap and tokens > 0:
                break  # (alone, a recompute of prompt + generated tokens may exceed the cap)
            waiting.popleft()
            running.append(r)
            alloc[r] = need
            kv_used += need
            if not chunked_prefill:
                tokens += target[r]
            if start[r] != start[r]:  # NaN: first admission
                start[r] = t
                bid[r] = it
        if not reserve:
            while running and kv_used + sum(1 for r in running if done[r] == target[r]) > budget:
                evict(running[-1])
        decode = [r for r in running if done[r] == target[r]]
        chunks: list[tuple[int, int]] = []
        left = tok_cap - len(decode)
        for r in running:
            rem = target[r] - done[r]
            if rem > 0:
                c = rem if not chunked_prefill else int(min(rem, left))
                if c <= 0:
                    break
                chunks.append((r, c))
                left -= c
        if not decode and not chunks:
            raise RuntimeError("continuous batching made no progress (budget settings leave no room)")
        pre_tok = sum(c for _, c in chunks)
        ctx = sum(kvlen[r] + 1 for r in decode)
        if not reserve:
            kv_used += len(decode)
            for r in decode:
                alloc[r] += 1
        end = t + cost.iteration_time(pre_tok, len(decode), ctx)
        useful = len(decode)
        finished: list[int] = []
        for r in decode:
            kvlen[r] += 1
            gen[r] += 1
            if gen[r] == ol[r]:
                finished.append(r)
        for r, c in chunks:
            done[r] += c
            kvlen[r] += c
            if done[r] == target[r]:
                useful += 1 if recompute[r] else pl[r]
                recompute[r] = False
                gen[r] += 1
                if first[r] != first[r]:
                    first[r] = end
                if gen[r] == ol[r]:
                    finished.append(r)
        it_rows.append((t, end, len(decode) + len(chunks), pre_tok, len(decode), useful,
                        pre_tok + len(decode), kv_used))
        for r in finished:
            finish[r] = end
            running.remove(r)
            kv_used -= alloc[r]
            alloc[r] = 0
        t = end
        it += 1

    rec = empty_records(n)
    rec["arrival"] = a
    rec["start"] = start
    rec["first_token"] = first
    rec["finish"] = finish
    rec["batch_id"] = bid
    rec["instance"] = 0
    rec["prompt_tokens"] = p
    rec["output_tokens"] = o
    rec["preemptions"] = preempt
    bat = make_batches(len(it_rows))
    if it_rows:
        cols = list(zip(*it_rows))
        bat["start"], bat["end"] = cols[0], cols[1]
        bat["size"] = cols[2]
        bat["executed"] = cols[2]
        bat["prefill_tokens"] = cols[3]
        bat["decode_seqs"] = cols[4]
        bat["useful_tokens"] = cols[5]
        bat["executed_tokens"] = cols[6]
        bat["kv_tokens"] = cols[7]
        bat["instance"] = 0
    config = dict(max_active=max_active, kv_budget_tokens=kv_budget_tokens, chunked_prefill=chunked_prefill,
                  max_num_tokens=max_num_tokens, kv_policy=policy, cost=repr(cost))
    return SimResult(rec, bat, "continuous", config, instances=1, capacity_rps=None, warmup=warmup,
                     extra={"eta": "tokens", "kv": True, "tokens": True,
                            "summary_extra": {"preemptions": int(np.sum(preempt))}})
