"""KV-cache capacity (`batchlab.theory.kv`) checked on the toy LM, its batcher and `lm_stream`, and
serving cost by busy time (the article's Cost_per) and by wall time (chapters 03, 06, 09)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from batchlab.config_pbtxt import parse_config
from batchlab.lm import ContinuousBatcher, Sequence as LMSequence, step
from batchlab.load import RequestSpec, run_open_loop
from batchlab.models.requests import generate_inputs
from batchlab.theory import formulas as F
from batchlab.theory.kv import kv_bytes_per_token, max_concurrent_sequences


def toy_kv_accounting(lm: Any, concurrency: Sequence[int], prompt_tokens: int = 16,
                      steps: int = 16) -> list[dict[str, Any]]:
    """Step n sequences of a `prompt_tokens` prompt together `steps` times, for each n in
    `concurrency`: formula_bytes (n · tokens · bytes_per_token) next to used and allocated bytes."""
    if prompt_tokens < 1 or steps < 1:
        raise ValueError("prompt_tokens and steps must be >= 1")
    cfg = lm.config
    bpt = kv_bytes_per_token(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, 4)
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
    cfg = lm.config
    bpt = kv_bytes_per_token(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, 4)
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

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-friendly)."""
        return asdict(self)


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
    out = {}
    for key in ("max_active", "kv_token_budget", "max_tokens_limit"):
        if key in c.parameters:
            out[key] = int(c.parameters[key].string_value)
    if "max_active" not in out or "kv_token_budget" not in out:
        raise ValueError("the config has no max_active / kv_token_budget parameters")
    return out


def server_kv_admission(server: Any, model: str, n_requests: int, prompt_tokens: int, max_tokens: int,
                        timeout_s: float = 60.0) -> dict[str, Any]:
    """Send `n_requests` generations at once over gRPC streams to an `lm_stream`-like model;
    report the largest ACTIVE and KV_TOKENS it streamed back, and the tokens received."""
    if n_requests < 1 or prompt_tokens < 1 or max_tokens < 1:
        raise ValueError("n_requests, prompt_tokens and max_tokens must be >= 1")
    peak = {"ACTIVE": 0, "KV_TOKENS": 0}

    def track(responses: list[dict[str, np.ndarray]]) -> None:
        for outs in responses:
            for key in peak:
                peak[key] = max(peak[key], int(outs[key].reshape(-1)[0]))

    rng = np.random.default_rng(0)
    prompts = [np.concatenate([[1], rng.integers(4, 200, prompt_tokens - 1)]).astype(np.int32) for _ in range(n_requests)]
    specs = [RequestSpec(generate_inputs(p, max_tokens, ignore_eos=True, batched=False), check=track) for p in prompts]
    rec = run_open_loop(server, model, specs, arrivals=np.zeros(n_requests), protocol="grpc-stream",
                        request_timeout_s=timeout_s, stats=False, progress=False, warn=False).records
    return {"requests": n_requests, "tokens": int(rec.tokens.sum()), "max_active_seen": peak["ACTIVE"],
            "max_kv_tokens_seen": peak["KV_TOKENS"], "errors": [e for e in rec.error if e is not None]}
