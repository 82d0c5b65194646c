"""KV-cache capacity (`batchlab.theory.kv`) checked on the toy LM, its batcher and `lm_stream`; how much
of the allocated KV holds tokens (reserved, contiguous, paged) and how many sequences a fixed pool
holds, measured by the server; serving cost by busy time (the article's Cost_per) and by wall time
(chapters 03, 06, 09)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from batchlab.batching import BlockManager, GenerationRequest, OnDemandAdmission, ReserveAdmission, Scheduler
from batchlab.batching.blocks import BLOCK_SIZE
from batchlab.config_pbtxt import parse_config
from batchlab.course.llm_serving import final_figures, step_figures, stream_requests, token_prompt
from batchlab.lm import ContinuousBatcher, Sequence as LMSequence, step
from batchlab.theory import formulas as F
from batchlab.theory.kv import max_concurrent_sequences


def toy_kv_accounting(lm: Any, concurrency: Sequence[int], prompt_tokens: int = 16,
                      steps: int = 16) -> list[dict[str, Any]]:
    """Step n sequences of a `prompt_tokens` prompt together `steps` times, for each n in
    `concurrency`: formula_bytes (n · tokens · bytes_per_token) next to used and allocated bytes."""
    if prompt_tokens < 1 or steps < 1:
        raise ValueError("prompt_tokens and steps must be >= 1")
    cfg, bpt = lm.config, lm.new_cache(1).bytes_per_token
    held = prompt_tokens + steps - 1
    rows = []
    for n in concurrency:
        if n < 1:
            raise ValueError("concurrency values must be >= 1")
        prompts = [[(7 * i + j) % (cfg.vocab_size - 4) + 4 for j in range(prompt_tokens)] for i in range(n)]
        seqs = [LMSequence(lm, p, max_tokens=steps + 1, ignore_eos=True, seq_id=i) for i, p in enumerate(prompts)]
        for _ in range(steps):
            step(lm, seqs)
        used = sum(s.cache.used_bytes for s in seqs)
        alloc = sum(s.cache.allocated_bytes for s in seqs)
        rows.append({"n": int(n), "tokens_per_seq": held, "bytes_per_token": bpt,
                     "formula_bytes": n * held * bpt, "used_bytes": int(used), "allocated_bytes": int(alloc)})
    return rows


def toy_admission_check(lm: Any, budget_bytes: int, prompt_tokens: int, max_tokens: int,
                        waiting: int) -> dict[str, Any]:
    """Submit `waiting` sequences to the toy `ContinuousBatcher` under a KV budget of `budget_bytes`
    and step once; `admitted` should equal `predicted` (`max_concurrent_sequences`)."""
    cfg, bpt = lm.config, lm.new_cache(1).bytes_per_token
    per_seq = prompt_tokens + max_tokens
    predicted = max_concurrent_sequences(budget_bytes, bpt, per_seq)
    budget_tokens = int(budget_bytes // bpt)
    if predicted < 1:
        raise ValueError(f"a budget of {budget_bytes} bytes holds no sequence of {per_seq} tokens")
    batcher = ContinuousBatcher(lm, max_active=max(waiting, 1), kv_token_budget=budget_tokens)
    for i in range(waiting):
        prompt = [(3 * i + j) % (cfg.vocab_size - 4) + 4 for j in range(prompt_tokens)]
        batcher.submit(LMSequence(lm, prompt, max_tokens=max_tokens, ignore_eos=True, seq_id=i))
    report = batcher.step()
    admitted = report.batch_size
    batcher.drain()
    return {"bytes_per_token": bpt, "budget_bytes": int(budget_bytes), "budget_tokens": budget_tokens,
            "tokens_per_seq": per_seq, "predicted": predicted, "admitted": admitted,
            "waiting_after": waiting - admitted}


@dataclass(frozen=True)
class CostBreakdown:
    """Cost of one measured run at `price_per_hour`: per request by busy time (the article's
    formula) and by wall time (the bill), and per 10⁶ generated tokens (None without tokens)."""

    label: str
    price_per_hour: float
    n_requests: int
    t_busy_s: float
    t_wall_s: float
    utilization: float
    throughput_rps: float
    per_request_busy: float
    per_request_wall: float
    per_million_tokens_busy: float | None
    per_million_tokens_wall: float | None


def cost_from_run(label: str, price_per_hour: float, n_requests: int, t_busy_s: float, t_wall_s: float,
                  tokens: int | None = None) -> CostBreakdown:
    """Both cost views of `n_requests` served in `t_wall_s`, busy `t_busy_s`, `tokens` generated."""
    if price_per_hour < 0:
        raise ValueError("price_per_hour must be >= 0")
    if n_requests <= 0 or t_wall_s <= 0 or t_busy_s < 0:
        raise ValueError("need n_requests > 0, t_wall_s > 0 and t_busy_s >= 0")
    if t_busy_s > t_wall_s * 1.2:
        # a few percent is clock skew; more means several instances' busy time was summed
        raise ValueError(f"busy time {t_busy_s:.3f} s exceeds wall time {t_wall_s:.3f} s by more than 20% "
                         "(count one instance's busy time, or divide by the number of instances)")
    util = t_busy_s / t_wall_s
    busy = F.cost_per_request(price_per_hour, t_busy_s, n_requests)
    wall = F.cost_per_request(price_per_hour, t_wall_s, n_requests)
    pm_busy = pm_wall = None
    if tokens:
        pm_busy = F.cost_per_million_tokens(price_per_hour, tokens / t_busy_s) if t_busy_s > 0 else None
        pm_wall = F.cost_per_million_tokens(price_per_hour, tokens / t_wall_s)
    return CostBreakdown(label, float(price_per_hour), int(n_requests), float(t_busy_s), float(t_wall_s),
                         float(util), n_requests / t_wall_s, busy, wall, pm_busy, pm_wall)


def cost_table(price_per_hour: float, runs: Iterable[dict[str, Any]]) -> list[CostBreakdown]:
    """`cost_from_run` for each run dict (keys: label, n_requests, t_busy_s, t_wall_s, tokens?)."""
    out = []
    for r in runs:
        missing = {"label", "n_requests", "t_busy_s", "t_wall_s"} - set(r)
        if missing:
            raise ValueError(f"run is missing {', '.join(sorted(missing))}")
        out.append(cost_from_run(r["label"], price_per_hour, r["n_requests"], r["t_busy_s"], r["t_wall_s"],
                                 r.get("tokens")))
    return out


def stream_model_limits(config: Any) -> dict[str, int]:
    """`max_active`, `kv_token_budget` (and `max_tokens_limit`) parameters of an `lm_stream`-like config."""
    c = parse_config(config) if isinstance(config, str) else config
    keys = ("max_active", "kv_token_budget", "max_tokens_limit")
    out = {k: int(c.parameters[k].string_value) for k in keys if k in c.parameters}
    if "max_active" not in out or "kv_token_budget" not in out:
        raise ValueError("the config has no max_active / kv_token_budget parameters")
    return out


def server_kv_admission(server: Any, model: str, n_requests: int, prompt_tokens: int, max_tokens: int
                        ) -> dict[str, Any]:
    """Send `n_requests` generations at once over gRPC streams to an `lm_stream`-like model
    (`stream_requests`: RuntimeError if any fails); report the largest ACTIVE and KV_TOKENS it
    streamed back, and the tokens received."""
    if n_requests < 1 or prompt_tokens < 1 or max_tokens < 1:
        raise ValueError("n_requests, prompt_tokens and max_tokens must be >= 1")
    prompts = [token_prompt(prompt_tokens, i) for i in range(n_requests)]
    rec = stream_requests(server, model, prompts, [max_tokens] * n_requests, np.zeros(n_requests))
    steps = step_figures(rec)
    return {"requests": n_requests, "tokens": int(rec.tokens.sum()), "max_active_seen": int(steps["ACTIVE"].max()),
            "max_kv_tokens_seen": int(steps["KV_TOKENS"].max())}


# ---- chapter 03: how much of the allocated KV holds tokens, and how many sequences a pool holds ----

#: The three ways chapter 03 keeps one sequence's KV: its own contiguous array (the request-level models),
#: blocks taken as it grows (the paged pool, on demand) and blocks taken for its whole future at once.
KV_LAYOUTS = ("contiguous", "paged", "reserve")


def kv_layouts(lm: Any, prompt_tokens: int = 8, max_tokens: int = 72, block_size: int = BLOCK_SIZE
               ) -> dict[str, Any]:
    """One sequence (a `prompt_tokens` prompt, `max_tokens` tokens to generate) as it grows, and the token
    slots each layout allocates to it after every step but the last, by the layouts' own code (no model
    is run: allocation does not depend on the values): "contiguous", its `KVCache` from `lm.new_cache`
    grown by `reserve` as `ToyLM.forward` grows it (`generate`, `lm_iterative`); "paged" and "reserve",
    its block table under the `Scheduler` with on-demand and reserve admission (`lm_stream`'s pool, blocks
    of `block_size` tokens). Returns `held` (positions holding KV after each step), `slots` (layout ->
    slots per step), `block_size`."""
    if prompt_tokens < 1 or max_tokens < 2:
        raise ValueError("need prompt_tokens >= 1 and max_tokens >= 2")
    slots: dict[str, list[int]] = {"paged": [], "reserve": []}
    held: list[int] = []
    for layout, policy in (("paged", OnDemandAdmission()), ("reserve", ReserveAdmission())):
        scheduler = Scheduler(BlockManager(None, block_size), policy, max_active=1)
        request = GenerationRequest(0, [1] * prompt_tokens, max_tokens)
        scheduler.submit(request)
        for _ in range(max_tokens - 1):
            scheduler.complete(scheduler.schedule(), [0])
            slots[layout].append(len(request.table.blocks) * scheduler.blocks.block_size)
            if layout == "paged":
                held.append(request.computed)
    cache = lm.new_cache(prompt_tokens)
    slots["contiguous"] = []
    for n in held:
        cache.reserve(n)
        slots["contiguous"].append(cache.capacity)
    return {"held": np.array(held), "slots": {k: np.array(slots[k]) for k in KV_LAYOUTS}, "block_size": block_size}


#: Chapter 03's `lm_stream` copies, the two admission policies over one pool each: a pool roomy enough
#: that nobody waits for KV (the share of allocated KV holding tokens; `lm_iterative`, contiguous caches,
#: runs beside them), and a small fixed pool of 640 token positions, 40 blocks (how many sequences it
#: holds at once: reserved, 2 of `pool_round`'s requests, each holding prompt + 256 tokens, 17 to 20 blocks).
POOL_VARIANTS: dict[str, dict[str, str]] = {
    "lm_reserve": {"kv_policy": "reserve", "max_active": "16", "kv_token_budget": "8192"},
    "lm_paged": {"kv_policy": "on_demand", "max_active": "16", "kv_token_budget": "8192"},
    "lm_reserve_640": {"kv_policy": "reserve", "max_active": "16", "kv_token_budget": "640"},
    "lm_paged_640": {"kv_policy": "on_demand", "max_active": "16", "kv_token_budget": "640"},
}


def chat_workload(n: int, seed: int = 0, prompt_tokens: tuple[int, int] = (48, 224), max_tokens: int = 256
                  ) -> tuple[list[np.ndarray], list[int], list[int]]:
    """`n` chat turns: prompts of `prompt_tokens` (lo, hi) tokens, each asking for up to `max_tokens` and
    stopping at its own <eos> (sampled at temperature 1 with its seed, so replies run from a few tokens
    to the cap); returns prompts, max_tokens and seeds."""
    lo, hi = prompt_tokens
    if n < 1 or not 2 <= lo <= hi:
        raise ValueError("n must be >= 1 and prompt_tokens a (lo, hi) range with 2 <= lo <= hi")
    rng = np.random.default_rng(seed)
    prompts = [np.concatenate([[1], rng.integers(4, 200, int(k) - 1)]).astype(np.int32)
               for k in rng.integers(lo, hi + 1, n)]
    return prompts, [max_tokens] * n, [int(s) for s in rng.integers(0, 2**31, n)]


def _chat_round(server: Any, model: str, n: int, seed: int, arrivals: Sequence[float],
                prompt_tokens: tuple[int, int], max_tokens: int = 256) -> Any:
    """Run `chat_workload(n, seed, prompt_tokens, max_tokens)` on `model` (lm_iterative takes batched inputs)."""
    prompts, max_tokens, seeds = chat_workload(n, seed, prompt_tokens, max_tokens)
    return stream_requests(server, model, prompts, max_tokens, arrivals, temperature=1.0, seeds=seeds,
                           ignore_eos=False, batched=model.startswith("lm_iterative"))


def kv_share_round(server: Any, model: str, n: int = 8, seed: int = 0, gap_s: float = 0.05,
                   prompt_tokens: tuple[int, int] = (48, 224), max_tokens: int = 256) -> dict[str, Any]:
    """The chat workload (one request every `gap_s` s) on `model`: the share of allocated KV that holds
    tokens, from the server's own figures after every step (sum of held / sum of allocated): an
    `lm_stream` reports its pool blocks (KV_BLOCKS · BLOCK_SIZE allocated), `lm_iterative` its
    contiguous arrays (KV_SLOTS); also the tokens generated (the same replies on every model)."""
    rec = _chat_round(server, model, n, seed, np.arange(n) * gap_s, prompt_tokens, max_tokens)
    steps = step_figures(rec)
    allocated = steps["KV_SLOTS"] if "KV_SLOTS" in steps else steps["KV_BLOCKS"] * BLOCK_SIZE
    held = steps["KV_TOKENS"]
    return {"model": model, "share": float(held.sum() / allocated.sum()), "steps": int(held.size),
            "mean_held": float(held.mean()), "mean_allocated": float(allocated.mean()),
            "tokens": int(rec.tokens.sum())}


def pool_round(server: Any, model: str, n: int = 8, seed: int = 0, prompt_tokens: tuple[int, int] = (16, 64),
               max_tokens: int = 256) -> dict[str, Any]:
    """Short chat turns (`prompt_tokens`, up to `max_tokens` each), `n` requests at once, on an
    `lm_stream` copy: how many sequences its pool held at once (the server's ACTIVE: its peak, the
    blocks in use in the first step that reached it, its mean over the steps in which requests were
    still waiting), the pool's peak blocks, preemptions and the positions recomputed, tokens/s."""
    rec = _chat_round(server, model, n, seed, np.zeros(n), prompt_tokens, max_tokens)
    steps, final = step_figures(rec), final_figures(rec)
    queued = steps["WAITING"] > 0  # steps in which the pool, not the work, limited the batch
    held = float(steps["ACTIVE"][queued].mean()) if queued.any() else float("nan")
    peak = int(np.argmax(steps["ACTIVE"]))
    return {"model": model, "max_active": int(steps["ACTIVE"][peak]), "blocks_at_peak": int(steps["KV_BLOCKS"][peak]),
            "held_while_queued": held, "mean_active": float(steps["ACTIVE"].mean()),
            "peak_kv_blocks": int(steps["KV_BLOCKS"].max()), "preemptions": int(final["PREEMPTIONS"].sum()),
            "recomputed_tokens": int(final["RECOMPUTED_TOKENS"].sum()),
            "tokens_per_s": float(rec.tokens.sum() / (rec.last.max() - rec.sent.min()))}
