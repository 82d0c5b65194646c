"""Chapter 11's experiments: today's LLM-serving knobs (the per-step token budget, chunked prefill,
prefix caching, preemption) on the real `lm_stream` model and in `sim.continuous`, and a simulation of
prefill/decode disaggregation (DistServe, Splitwise). Every function returns rows (dicts)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from batchlab import config_pbtxt as cfg
from batchlab._validate import count
from batchlab.lm.scheduler import MAX_ACTIVE
from batchlab.load import RequestSpec, run_open_loop
from batchlab.models.requests import generate_inputs
from batchlab.server import TritonServer
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.service import TokenCost

#: lm_stream copies the chapter measures: model name -> the config parameters it changes.
VARIANTS: dict[str, dict[str, str]] = {
    "lm_whole": {},                                                   # a prompt's prefill in one step
    "lm_chunk32": {"max_num_tokens": "32", "chunked_prefill": "true"},
    "lm_chunk128": {"max_num_tokens": "128", "chunked_prefill": "true"},
    "lm_prefix": {"prefix_cache_blocks": "64", "block_size": "16"},
    "lm_reserve": {"max_active": "8", "kv_token_budget": "200", "kv_policy": "reserve"},
    "lm_on_demand": {"max_active": "8", "kv_token_budget": "200", "kv_policy": "on_demand"},
}


def stage_variants(dest: str | Path, variants: Mapping[str, Mapping[str, str]] = VARIANTS) -> Path:
    """Write one `lm_stream` copy per variant (its parameters changed) into repository `dest`."""
    base = cfg.load_config_text("lm_stream")
    for name, params in variants.items():
        params = {"max_prompt_tokens": "480", **params}  # the chapter's long prompts (default limit 256)
        c = cfg.edit_config(base, {"name": name, "parameters": {k: f'string_value: "{v}"' for k, v in params.items()}})
        cfg.stage_model(dest, name, cfg.to_text(c), "lm_stream")
    return Path(dest)


@contextlib.contextmanager
def serving_server(variants: Mapping[str, Mapping[str, str]] = VARIANTS) -> Iterator[TritonServer]:
    """A private embedded server with the variants staged in a temporary repository (stopped on exit)."""
    with tempfile.TemporaryDirectory(prefix="batchlab-ch11-") as tmp:
        with TritonServer(stage_variants(tmp, variants)) as server:
            yield server


def start_server(variants: Mapping[str, Mapping[str, str]] = VARIANTS) -> TritonServer:
    """`serving_server` for a notebook: started now, stopped (and its repository removed) by `stop_server`."""
    return TritonServer(stage_variants(tempfile.mkdtemp(prefix="batchlab-ch11-"), variants)).start()


def stop_server(server: TritonServer) -> None:
    """Stop a server from `start_server` and remove its staged repository."""
    server.stop()
    shutil.rmtree(server.repo, ignore_errors=True)


def token_prompt(n: int, salt: int = 0) -> np.ndarray:
    """A prompt of `n` token ids (``<bos>`` first), different for each `salt`."""
    rng = np.random.default_rng(1000 + salt)
    return np.concatenate([[1], rng.integers(4, 200, count("n", n) - 1)]).astype(np.int32)


def stream_requests(server: Any, model: str, prompts: Sequence[np.ndarray], max_tokens: Sequence[int],
                    arrivals: Sequence[float], check: Callable | None = None) -> Any:
    """Send generations (EOS ignored) over gRPC streams at `arrivals` (s); the records, with each
    token's arrival time at the client (`token_times`) and the time the model sent it (`server_times`,
    its T_NS output in s); RuntimeError if any request failed."""
    server_times: list[list[float]] = [[] for _ in prompts]

    def stamps(i: int) -> Callable:
        def grab(responses: list[dict[str, np.ndarray]]) -> Any:
            server_times[i] = [int(r["T_NS"].reshape(-1)[0]) / 1e9 for r in responses if "T_NS" in r]
            return check(responses) if check is not None else None
        return grab

    specs = [RequestSpec(generate_inputs(p, m, ignore_eos=True, batched=False), check=stamps(i))
             for i, (p, m) in enumerate(zip(prompts, max_tokens))]
    rec = run_open_loop(server, model, specs, arrivals=np.asarray(arrivals, float), protocol="grpc-stream",
                        stats=False, progress=False, warn=False, record_token_times=True).records
    bad = [e for e in rec.error if e is not None]
    if bad:
        raise RuntimeError(f"{model}: {len(bad)} requests failed, first: {bad[0]}")
    rec.server_times = server_times
    return rec


def mixed_round(server: Any, model: str, n_decode: int = 4, decode_tokens: int = 64,
                long_prompt: int = 420, long_at: Sequence[float] = (0.03, 0.15, 0.27, 0.39),
                seed: int = 0) -> dict[str, Any]:
    """Short-prompt sequences decoding from t = 0 while long prompts arrive at `long_at` (s): the
    decoders' ITL (pooled gaps) as the server sent the tokens (`itl_*`) and as the client got them
    (`client_itl_p99_ms`: plus the client's own stalls), and the long prompts' TTFT (at the client)."""
    prompts = [token_prompt(8, seed * 100 + i) for i in range(n_decode)]
    prompts += [token_prompt(long_prompt, seed * 100 + 50 + j) for j in range(len(long_at))]
    outs = [decode_tokens] * n_decode + [4] * len(long_at)
    rec = stream_requests(server, model, prompts, outs, [0.0] * n_decode + list(long_at))
    if any(len(rec.server_times[i]) != len(rec.token_times[i]) for i in range(n_decode)):
        raise RuntimeError(f"{model} sends no T_NS with its tokens: the server runs a batchlab older than this notebook's")
    gaps = np.concatenate([np.diff(rec.server_times[i]) for i in range(n_decode)])
    client_gaps = np.concatenate([np.diff(rec.token_times[i]) for i in range(n_decode)])
    long_ttft = [rec.token_times[i][0] - rec.sent[i] for i in range(n_decode, len(prompts))]
    return {"model": model, "itl_p50_ms": float(np.percentile(gaps, 50)) * 1e3,
            "itl_p99_ms": float(np.percentile(gaps, 99)) * 1e3,
            "client_itl_p99_ms": float(np.percentile(client_gaps, 99)) * 1e3,
            "long_ttft_p50_ms": float(np.median(long_ttft)) * 1e3,
            "decode_e2e_ms": float(np.median(rec.last[:n_decode] - rec.sent[:n_decode])) * 1e3}


def prefix_round(server: Any, model: str, shared: int = 320, own: int = 16, n: int = 8, gap_s: float = 0.15,
                 seed: int = 0) -> dict[str, Any]:
    """`n` requests, one every `gap_s` s (each finds the engine idle), whose prompts start with the same
    `shared`-token system prompt (new each `seed`) and end with `own` tokens of their own: TTFT."""
    system = token_prompt(shared, 7000 + seed)
    prompts = [np.concatenate([system, token_prompt(own + 1, 8000 + seed * 50 + i)[1:]]) for i in range(n)]
    rec = stream_requests(server, model, prompts, [4] * n, np.arange(n) * gap_s)
    ttft = np.array([t[0] for t in rec.token_times]) - rec.sent
    return {"model": model, "ttft_p50_ms": float(np.median(ttft)) * 1e3,
            "ttft_first_ms": float(ttft[0]) * 1e3, "ttft_rest_p50_ms": float(np.median(ttft[1:])) * 1e3}


def preemption_round(server: Any, model: str, n: int = 8, prompt: int = 24, max_tokens: int = 96,
                     seed: int = 0) -> dict[str, Any]:
    """`n` generations sent at once: tokens/s over the run, the largest batch (ACTIVE) the model
    streamed back, end-to-end p50 and the slowest request."""
    peak = [0]

    def track(responses: list[dict[str, np.ndarray]]) -> None:
        for outs in responses:
            peak[0] = max(peak[0], int(outs["ACTIVE"].reshape(-1)[0]))

    rec = stream_requests(server, model, [token_prompt(prompt, seed * 100 + i) for i in range(n)], [max_tokens] * n,
                  np.zeros(n), check=track)
    e2e = rec.last - rec.sent
    return {"model": model, "tokens_per_s": float(rec.tokens.sum() / (rec.last.max() - rec.sent.min())),
            "max_active": peak[0], "e2e_p50_s": float(np.median(e2e)), "e2e_max_s": float(e2e.max())}


def interleaved(fn: Callable[..., dict[str, Any]], server: Any, models: Sequence[str], rounds: int = 3,
                **kwargs: Any) -> list[dict[str, Any]]:
    """`fn(server, model, seed=r, **kwargs)` for r in rounds, the models alternating A/B/A/B…"""
    rows = []
    for r in range(count("rounds", rounds)):
        for m in models:
            rows.append({"round": r, **fn(server, m, seed=r, **kwargs)})
    return rows


def median_spread(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, tuple[float, float, float]]:
    """Per model: (median, min, max) of `key` over its rounds."""
    out = {}
    for m in dict.fromkeys(r["model"] for r in rows):
        x = [r[key] for r in rows if r["model"] == m]
        out[m] = (float(np.median(x)), float(min(x)), float(max(x)))
    return out


def round_ratios(rows: Sequence[Mapping[str, Any]], key: str, num: str, den: str) -> list[float]:
    """`key` of model `num` over model `den`, round by round (the two ran back to back, so a slow
    spell of the shared machine hits both)."""
    by = {(r["round"], r["model"]): r[key] for r in rows}
    return [by[(k, num)] / by[(k, den)] for k in sorted({r["round"] for r in rows}) if (k, num) in by and (k, den) in by]


# ---- simulations (the same scheduler, priced by a TokenCost) ----

#: a cost model shaped like the toy LM on this machine (µs): ~5 ms a step, ~0.2 ms a prompt token
TOY_COST = TokenCost(prefill_per_token=200, decode_base=4500, decode_per_seq=150)


def sim_mixed(max_num_tokens: int | None, cost: TokenCost = TOY_COST, n_decode: int = 4, decode_tokens: int = 64,
              long_prompt: int = 420, long_at: Sequence[float] = (0.03, 0.15, 0.27, 0.39)) -> dict[str, Any]:
    """`mixed_round`'s load in the simulator; None: whole prompts in one step, else chunked to the budget."""
    k = len(long_at)
    arr = np.array([0.0] * n_decode + list(long_at))
    res = simulate_continuous(arr, [8] * n_decode + [long_prompt] * k, [decode_tokens] * n_decode + [4] * k, cost,
                              max_active=MAX_ACTIVE, chunked_prefill=max_num_tokens is not None,
                              max_num_tokens=max_num_tokens, warmup=0.0)
    b, r = res.batches, res.records
    step_ms = (b["end"] - b["start"]) * 1e3
    # a decoder's ITL is the length of the step that produced its token: every step while it runs
    live = (b["start"] >= 0) & (b["end"] <= r["finish"][:n_decode].max())
    return {"max_num_tokens": max_num_tokens or 0, "step_max_ms": float(step_ms.max()),
            "itl_p99_ms": float(np.percentile(step_ms[live], 99)),
            "long_ttft_p50_ms": float(np.median(r["first_token"][n_decode:] - r["arrival"][n_decode:])) * 1e3,
            "tokens_per_s": float(r["output_tokens"].sum() / (r["finish"].max() - r["arrival"].min()))}


def sim_prefix(shared: int, prompt: int = 336, n: int = 20, block_size: int = 16, cost: TokenCost = TOY_COST,
               kv_bytes_per_token: int = 8192) -> dict[str, Any]:
    """`n` requests, engine idle for each, sharing a `shared`-token prefix: hit rate, TTFT p50 with
    and without the cache, and the cache's memory (the shared blocks, once)."""
    arr = np.arange(n) * 1.0
    kw = dict(max_active=4, warmup=0.0)
    plain = simulate_continuous(arr, [prompt] * n, [4] * n, cost, **kw)
    hit = simulate_continuous(arr, [prompt] * n, [4] * n, cost, shared_prefix_tokens=[shared] * n,
                              prefix_cache_blocks=256, block_size=block_size, **kw)
    ttft = lambda res: float(np.median(res.records["first_token"] - res.records["arrival"])) * 1e3  # noqa: E731
    cached = hit.extra["cached_tokens"]
    return {"shared": shared, "hit_rate": float(cached.sum() / (n * prompt)),
            "ttft_plain_ms": ttft(plain), "ttft_cached_ms": ttft(hit),
            "cache_kib": shared // block_size * block_size * kv_bytes_per_token / 1024}


def sim_preemption(kv_policy: str, budget: int = 200, n: int = 8, prompt: int = 24, max_tokens: int = 96,
                   cost: TokenCost = TOY_COST) -> dict[str, Any]:
    """`preemption_round`'s load in the simulator under `kv_policy`."""
    res = simulate_continuous(np.zeros(n), [prompt] * n, [max_tokens] * n, cost, max_active=MAX_ACTIVE,
                              kv_budget_tokens=budget, kv_policy=kv_policy, warmup=0.0)
    r, b = res.records, res.batches
    e2e = r["finish"] - r["arrival"]
    return {"kv_policy": kv_policy, "tokens_per_s": float(r["output_tokens"].sum() / r["finish"].max()),
            "max_active": int(b["size"].max()), "preemptions": int(r["preemptions"].sum()),
            "e2e_p50_s": float(np.median(e2e)), "e2e_max_s": float(e2e.max())}


def disaggregation(rate: float, transfer_ms: float, n: int = 400, prompt: int = 420, output: int = 64,
                   cost: TokenCost = TOY_COST, seed: int = 0) -> dict[str, Any]:
    """Two engines, Poisson arrivals at `rate` req/s. Colocated: each engine takes every other request
    and does its prefill and decode. Disaggregated: one engine only prefills (first token), the KV moves
    in `transfer_ms`, the other only decodes. TTFT p99 and TPOT p99 (ms) of each (simulation only)."""
    arr = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))
    tt = []
    for half in (arr[0::2], arr[1::2]):
        res = simulate_continuous(half, [prompt] * half.size, [output] * half.size, cost, max_active=16, warmup=0.0)
        tt.append(res.records)
    co_ttft = np.concatenate([r["first_token"] - r["arrival"] for r in tt])
    co_tpot = np.concatenate([(r["finish"] - r["first_token"]) / (output - 1) for r in tt])
    pre = simulate_continuous(arr, [prompt] * n, [1] * n, cost, max_active=16, warmup=0.0).records
    ready = pre["first_token"] + transfer_ms / 1e3
    order = np.argsort(ready, kind="stable")
    dec = simulate_continuous(ready[order], [1] * n, [output - 1] * n, cost, max_active=16, warmup=0.0).records
    dis_ttft = pre["first_token"] - arr
    dis_tpot = np.empty(n)
    dis_tpot[order] = (dec["finish"] - ready[order]) / (output - 1) + transfer_ms / 1e3 / (output - 1)
    p99 = lambda x: float(np.percentile(x, 99)) * 1e3  # noqa: E731
    return {"rate": rate, "transfer_ms": transfer_ms, "co_ttft_p99_ms": p99(co_ttft), "co_tpot_p99_ms": p99(co_tpot),
            "dis_ttft_p99_ms": p99(dis_ttft), "dis_tpot_p99_ms": p99(dis_tpot)}
