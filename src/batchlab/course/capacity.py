"""KV-cache capacity checked on the course's own code, and serving cost (chapters 03, 06, 09).

The capacity arithmetic (bytes per token, `MODEL_SHAPES`, `plan_kv`, `kv_plan_table`) lives in
`batchlab.theory.kv`. Here `toy_kv_accounting` runs the course's numpy LM (`batchlab.lm`) and
checks that the bytes its caches really hold match the formula, and `toy_admission_check` that an
admission budget derived from the formula admits exactly the predicted number of sequences;
`stream_model_limits` and `server_kv_admission` do the same against the real server.

Cost (chapter 06 「成本」):

    Cost_per = C_GPU · T_busy / N_req                        (the article's formula)
    Cost_per,wall = C_GPU · T_wall / N_req = Cost_per / U     (what a rented GPU costs: U = T_busy/T_wall)

`cost_from_run` turns a measurement (requests, busy seconds, wall seconds, tokens) into both,
plus the cost per million tokens. Prices are parameters: no default price is a fact.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import tritonclient.grpc as grpcclient

from batchlab.config_pbtxt import parse_config
from batchlab.lm import ContinuousBatcher, FCFSAdmission, Sequence as LMSequence, step
from batchlab.theory import formulas as F
from batchlab.theory.kv import kv_bytes_per_token, max_concurrent_sequences

__all__ = [
    "CostBreakdown",
    "toy_kv_accounting",
    "toy_admission_check",
    "cost_from_run",
    "cost_table",
    "stream_model_limits",
    "server_kv_admission",
]


# ----------------------------------------------------------------------------- the toy LM's own accounting


def toy_kv_accounting(lm: Any, concurrency: Sequence[int], prompt_tokens: int = 16,
                      steps: int = 16) -> list[dict[str, Any]]:
    """Run `lm` (a `batchlab.lm.ToyLM`) with n concurrent sequences for each n in `concurrency`.

    Each sequence gets a `prompt_tokens` prompt and all are stepped together `steps` times (the
    first step is the prefill; EOS ignored). A sequence then holds prompt + steps − 1 tokens in
    its cache (the newest token is written at the next step). The KV bytes the caches really
    hold are summed and compared with the formula n · (prompt + steps − 1) · bytes_per_token.
    Rows: n, tokens_per_seq, bytes_per_token, formula_bytes, used_bytes, allocated_bytes
    (capacity grows in blocks, so allocated ≥ used).
    """
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
    """Derive a KV budget in tokens from `budget_bytes`, give it to the toy continuous batcher
    (`batchlab.lm.ContinuousBatcher` with `FCFSAdmission`, which reserves prompt + max_tokens
    per sequence), submit `waiting` sequences and step once: the number admitted must equal
    `kv.max_concurrent_sequences(budget_bytes, bytes_per_token, prompt + max_tokens)`.
    """
    cfg = lm.config
    bpt = kv_bytes_per_token(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, 4)
    per_seq = prompt_tokens + max_tokens
    predicted = max_concurrent_sequences(budget_bytes, bpt, per_seq)
    budget_tokens = int(budget_bytes // bpt)
    if predicted < 1:
        raise ValueError(f"a budget of {budget_bytes} bytes holds no sequence of {per_seq} tokens")
    batcher = ContinuousBatcher(lm, FCFSAdmission(max_active=max(waiting, 1), kv_token_budget=budget_tokens))
    for i in range(waiting):
        prompt = [(3 * i + j) % (cfg.vocab_size - 4) + 4 for j in range(prompt_tokens)]
        batcher.submit(LMSequence(lm, prompt, max_tokens=max_tokens, ignore_eos=True, seq_id=i))
    report = batcher.step()
    admitted = report.batch_size
    batcher.drain()
    return {"bytes_per_token": bpt, "budget_bytes": int(budget_bytes), "budget_tokens": budget_tokens,
            "tokens_per_seq": per_seq, "predicted": predicted, "admitted": admitted,
            "waiting_after": waiting - admitted}


# ----------------------------------------------------------------------------- cost


@dataclass(frozen=True)
class CostBreakdown:
    """Cost of one measured run at a GPU price (`price_per_hour`, any currency).

    `per_request_busy` is the article's Cost_per = C_GPU·T_busy/N_req; `per_request_wall`
    charges the whole wall time (a rented GPU is paid for while idle too); `utilization` =
    T_busy/T_wall links them. `per_million_tokens_*` are the same per 10⁶ generated tokens
    (None without tokens).
    """

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
    """Both cost views of a run that completed `n_requests` in `t_wall_s` with the GPU (or model
    instance) busy `t_busy_s`; `tokens` generated tokens if any."""
    if price_per_hour < 0:
        raise ValueError("price_per_hour must be >= 0")
    if n_requests <= 0 or t_wall_s <= 0 or t_busy_s < 0:
        raise ValueError("need n_requests > 0, t_wall_s > 0 and t_busy_s >= 0")
    if t_busy_s > t_wall_s * 1.2:
        # measured windows can disagree by a few percent (server statistics vs client clock);
        # far more means the busy time of several instances was summed
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


# ----------------------------------------------------------------------------- on the real server


def stream_model_limits(config: Any) -> dict[str, int]:
    """`max_active` and `kv_token_budget` of a continuous-batching model config such as the
    course's `lm_stream` (its `parameters`), from config.pbtxt text or a parsed ModelConfig."""
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
    """Send `n_requests` generations at once to a decoupled continuous-batching model (the
    course's `lm_stream` interface: PROMPT, MAX_TOKENS, IGNORE_EOS in; TOKEN, ACTIVE, KV_TOKENS
    out) over one gRPC stream, and report the largest batch (ACTIVE) and KV tokens the model
    reported, with the number of responses."""
    if n_requests < 1 or prompt_tokens < 1 or max_tokens < 1:
        raise ValueError("n_requests, prompt_tokens and max_tokens must be >= 1")
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    done = threading.Event()
    finals = [0]

    def callback(result: Any, error: Any) -> None:
        results.put((result, error))

    try:
        client.start_stream(callback=callback)
        rng = np.random.default_rng(0)
        for i in range(n_requests):
            prompt = np.concatenate([[1], rng.integers(4, 200, prompt_tokens - 1)]).astype(np.int32)
            inputs = []
            for name, arr, dt in (("PROMPT", prompt, "INT32"), ("MAX_TOKENS", np.array([max_tokens], np.int32), "INT32"),
                                  ("IGNORE_EOS", np.array([True]), "BOOL")):
                t = grpcclient.InferInput(name, list(arr.shape), dt)
                t.set_data_from_numpy(arr)
                inputs.append(t)
            client.async_stream_infer(model, inputs, request_id=str(i), enable_empty_final_response=True)
        max_active = 0
        max_kv = 0
        tokens = 0
        errors: list[str] = []
        while finals[0] < n_requests:
            try:
                result, error = results.get(timeout=timeout_s)
            except queue.Empty:
                errors.append("timed out waiting for responses")
                break
            if error is not None:
                errors.append(str(error))
                finals[0] += 1
                continue
            resp = result.get_response()
            if resp.parameters.get("triton_final_response") and resp.parameters["triton_final_response"].bool_param:
                finals[0] += 1
            if resp.outputs:
                act = result.as_numpy("ACTIVE")
                kv = result.as_numpy("KV_TOKENS")
                if act is not None:
                    max_active = max(max_active, int(act.reshape(-1)[0]))
                if kv is not None:
                    max_kv = max(max_kv, int(kv.reshape(-1)[0]))
                tokens += 1
        done.set()
    finally:
        try:
            client.stop_stream()
        finally:
            client.close()
    return {"requests": n_requests, "tokens": tokens, "max_active_seen": max_active,
            "max_kv_tokens_seen": max_kv, "errors": errors}
