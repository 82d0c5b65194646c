"""Chapter 11's experiments: today's LLM-serving knobs (the step's shape and token budget, prefix
caching as shared blocks, preemption) on the real `lm_stream` model and in `sim.continuous`, the
simulator priced by a step cost calibrated on the server that runs the chapter; goodput (DistServe)
in a simulator sweep and on the server; a simulation of prefill/decode disaggregation (DistServe,
Splitwise). Every function returns rows (dicts)."""

from __future__ import annotations

import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from batchlab import config_pbtxt as cfg
from batchlab._validate import count
from batchlab.batching.scheduler import MAX_ACTIVE
from batchlab.load import RequestSpec, poisson_arrivals, run_open_loop
from batchlab.models.requests import generate_inputs
from batchlab.server import TritonServer, connect
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.service import TokenCost
from batchlab.sim.summary import percentile

#: The step policies the chapter compares: name -> `simulate_continuous` settings (and lm_stream's).
STEP_SETTINGS: dict[str, dict[str, Any]] = {
    "prefill_first": {"step_policy": "prefill_first"},  # vLLM V0's default before chunking, nano-vllm
    "whole": {"step_policy": "mixed"},                  # Orca: whole prompts in the decodes' step
    "chunked 32": {"step_policy": "chunked", "max_num_tokens": 32},    # Sarathi-Serve, vLLM V1
    "chunked 128": {"step_policy": "chunked", "max_num_tokens": 128},
}
#: The lm_stream copy that runs each step policy on the server.
POLICY_MODEL = {"whole": "lm_whole", "chunked 32": "lm_chunk32", "chunked 128": "lm_chunk128"}

#: lm_stream copies the chapter measures: model name -> the config parameters it changes.
VARIANTS: dict[str, dict[str, str]] = {
    **{m: {k: str(v) for k, v in STEP_SETTINGS[p].items()} for p, m in POLICY_MODEL.items()},
    # prefix caching: full blocks shared by hash (lm_whole is the same model without it)
    "lm_prefix": {"prefix_caching": "true"},
    # preemption, isolated: 8 sequences of 24 + 64 tokens (2 blocks each at the start, 6 at their end),
    # all 8 started on demand in both; in 16 blocks they outgrow the pool (preempted, recomputed), in 128 never
    "lm_on_demand": {"max_active": "8", "kv_token_budget": "256", "kv_policy": "on_demand"},
    "lm_on_demand_roomy": {"max_active": "8", "kv_token_budget": "2048", "kv_policy": "on_demand"},
}


def stage_variants(dest: str | Path, variants: Mapping[str, Mapping[str, str]] = VARIANTS,
                   models: Sequence[str] = ()) -> Path:
    """Write one `lm_stream` copy per variant (its parameters changed) into repository `dest`, and the
    course `models` as they are."""
    base = cfg.load_config_text("lm_stream")
    for name, params in variants.items():
        params = {"max_prompt_tokens": "480", **params}  # the chapter's long prompts (default limit 256)
        c = cfg.edit_config(base, {"name": name, "parameters": {k: f'string_value: "{v}"' for k, v in params.items()}})
        cfg.stage_model(dest, name, cfg.to_text(c), "lm_stream")
    for name in models:
        cfg.stage_model(dest, name, None, name)
    return Path(dest)


def serving_server(variants: Mapping[str, Mapping[str, str]] = VARIANTS, models: Sequence[str] = ()
                   ) -> TritonServer:
    """A private embedded server (not started) with the variants (and `models`) staged in a temporary
    repository: ``with serving_server() as server``, or `.start()` then `.stop()` (the repository goes too)."""
    repo = Path(tempfile.mkdtemp(prefix="batchlab-ch11-"))
    try:
        return connect(stage_variants(repo, variants, models), private=True, owns_repo=True)
    except BaseException:  # bad variants or models: leave no folder behind
        shutil.rmtree(repo, ignore_errors=True)
        raise


def token_prompt(n: int, salt: int = 0) -> np.ndarray:
    """A prompt of `n` token ids (``<bos>`` first), different for each `salt`."""
    rng = np.random.default_rng(1000 + salt)
    return np.concatenate([[1], rng.integers(4, 200, count("n", n) - 1)]).astype(np.int32)


#: Scalar outputs of lm_stream's responses that `stream_requests` keeps (the server's own figures).
FIGURES = ("T_NS", "ACTIVE", "WAITING", "KV_BLOCKS", "KV_TOKENS", "CACHED_TOKENS", "PREEMPTIONS",
           "RECOMPUTED_TOKENS", "KV_SLOTS")


def stream_requests(server: Any, model: str, prompts: Sequence[np.ndarray], max_tokens: Sequence[int],
                    arrivals: Sequence[float], check: Callable | None = None, temperature: float | None = None,
                    seeds: Sequence[int] | None = None, ignore_eos: bool = True, batched: bool = False) -> Any:
    """Send generations over gRPC streams at `arrivals` (s); the records, with each token's arrival at
    the client (`token_times`), the time the model sent it (`server_times`: its T_NS output, moved onto
    the client's clock by the smallest client − server gap, so the fastest token's transit counts 0;
    `server_ttft`: the first of them − the send time) and each response's scalar `FIGURES`
    (`figures[i]`: one dict per response); RuntimeError if any request failed. With `temperature`
    and per-request `seeds` (and ``ignore_eos=False``) each request stops at its own <eos>, as chat
    replies do; `batched` for `lm_iterative`'s inputs."""
    figures: list[list[dict[str, int]]] = [[] for _ in prompts]

    def grab(i: int, responses: list[dict[str, np.ndarray]]) -> Any:
        figures[i] = [{k: int(r[k].reshape(-1)[0]) for k in FIGURES if k in r} for r in responses]
        return check(responses) if check is not None else None

    seeds = [None] * len(prompts) if seeds is None else list(seeds)
    specs = [RequestSpec(generate_inputs(p, m, temperature=temperature, seed=s, ignore_eos=ignore_eos,
                                         batched=batched), check=partial(grab, i), sequence_start=batched)
             for i, (p, m, s) in enumerate(zip(prompts, max_tokens, seeds))]
    rec = run_open_loop(server, model, specs, arrivals=np.asarray(arrivals, float), protocol="grpc-stream",
                        stats=False, progress=False, warn=False, record_token_times=True).records
    bad = [e for e in rec.error if e is not None]
    if bad:
        raise RuntimeError(f"{model}: {len(bad)} requests failed, first: {bad[0]}")
    rec.figures = figures
    rec.server_times = on_client_clock(rec.token_times, [[f["T_NS"] / 1e9 for f in fs if "T_NS" in f]
                                                         for fs in figures])
    rec.server_ttft = np.array([s[0] if s else np.nan for s in rec.server_times]) - rec.sent
    return rec


def on_client_clock(token_times: Sequence[Sequence[float]], stamps: Sequence[Sequence[float]]) -> list[list[float]]:
    """The server's stamps (s) of each request's tokens moved onto the client's clock (s): shifted by the
    smallest client − server gap over all tokens (a token cannot arrive before it was sent), so the
    fastest token's transit counts 0; the stamps as they are when no request has both."""
    pairs = [(np.asarray(c, float), np.asarray(s, float)) for c, s in zip(token_times, stamps)
             if c is not None and len(s) and len(c) == len(s)]
    shift = min(float((c - s).min()) for c, s in pairs) if pairs else 0.0
    return [[t + shift for t in s] for s in stamps]


def step_figures(rec: Any) -> dict[str, np.ndarray]:
    """The server's per-step figures from a run's responses, one row per step (a step streams the same
    T_NS to every sequence it served): columns T_NS and whichever of ACTIVE, WAITING, KV_BLOCKS,
    KV_TOKENS, KV_SLOTS the model sent, in time order."""
    steps: dict[int, dict[str, int]] = {}
    for fs in rec.figures:
        for f in fs:
            if "T_NS" in f:
                steps.setdefault(f["T_NS"], f)
    rows = [steps[t] for t in sorted(steps)]
    keys = [k for k in ("T_NS", "ACTIVE", "WAITING", "KV_BLOCKS", "KV_TOKENS", "KV_SLOTS") if rows and k in rows[0]]
    return {k: np.array([r.get(k, 0) for r in rows], dtype=np.int64) for k in keys}


def prefill_window(rec: Any, request: int, n_before: int) -> tuple[int, float]:
    """Request `request`'s prefill as the server ran it: the steps from the one that admitted it (the
    first whose ACTIVE exceeds the `n_before` sequences already running) to the one that sent its first
    token, both counted, and the time from the end of the step before the first to that token (s).
    Server-side: a busy client or a late gRPC delivery changes neither."""
    steps = step_figures(rec)
    first = rec.figures[request][0]["T_NS"]
    end = int(np.searchsorted(steps["T_NS"], first))
    start = next(k for k, n in enumerate(steps["ACTIVE"]) if n > n_before or k == end)
    before = steps["T_NS"][start - 1] if start > 0 else first
    return end - start + 1, float(first - before) / 1e9


def final_figures(rec: Any) -> dict[str, np.ndarray]:
    """Per request, what its final response reported: CACHED_TOKENS, PREEMPTIONS, RECOMPUTED_TOKENS."""
    keys = ("CACHED_TOKENS", "PREEMPTIONS", "RECOMPUTED_TOKENS")
    return {k: np.array([fs[-1].get(k, 0) if fs else 0 for fs in rec.figures], dtype=np.int64) for k in keys}


# ---- the step cost of the machine that runs the chapter, read from the server's own steps ----

def whole_prompt_steps(rec: Any, prompt_tokens: Sequence[int]) -> np.ndarray:
    """Rows (decodes, prompt tokens, seconds) of a whole-prompt model's steps (lm_whole: a prompt is
    computed in the step that streams its first token), from the server's T_NS: one step's tokens
    share a T_NS; a step is timed (T_NS minus the step before's) when a sequence ran through both,
    so the engine went straight from one to the next."""
    steps: dict[int, list] = {}
    for i, fs in enumerate(rec.figures):
        stamps = [f["T_NS"] for f in fs if "T_NS" in f]
        for k, t in enumerate(stamps):
            s = steps.setdefault(t, [0, 0, set(), set()])  # decodes, prompt tokens, who ran, who goes on
            if k:
                s[0] += 1
            else:
                s[1] += int(prompt_tokens[i])
            s[2].add(i)
            if k < len(stamps) - 1:
                s[3].add(i)
    t = sorted(steps)
    rows = [(steps[b][0], steps[b][1], (b - a) / 1e9) for a, b in zip(t, t[1:]) if steps[a][3] & steps[b][2]]
    return np.array(rows, dtype=float).reshape(-1, 3)


def fit_cost(steps: np.ndarray, min_prompt: int = 64, min_steps: int = 3) -> TokenCost:
    """The `TokenCost` (µs) of timed steps (`whole_prompt_steps` rows): a + c·d through the median
    decode-only step of each batch size d timed at least `min_steps` times (the median of the slopes
    between them, then of the intercepts), b the median over steps that computed ≥ `min_prompt`
    prompt tokens of (t − a − c·d) / p. Medians, so a step the shared machine stretched does not
    move it; ValueError when the steps show fewer than two such batch sizes or no long prompt."""
    steps = np.asarray(steps, float).reshape(-1, 3)
    dec, long = steps[steps[:, 1] == 0], steps[steps[:, 1] >= min_prompt]
    sizes = [d for d in np.unique(dec[:, 0]) if (dec[:, 0] == d).sum() >= min_steps]
    if len(sizes) < 2 or long.size == 0:
        raise ValueError(f"the steps show {len(sizes)} decode batch sizes timed {min_steps}+ times and {len(long)} "
                         f"steps with a prompt of >= {min_prompt} tokens: need two and one to fit a step cost")
    x = np.array(sizes)
    y = np.array([np.median(dec[dec[:, 0] == d, 2]) for d in sizes]) * 1e6
    c = max(float(np.median([(y[j] - y[i]) / (x[j] - x[i]) for i in range(x.size) for j in range(i + 1, x.size)])), 0.0)
    a = max(float(np.median(y - c * x)), 1.0)
    b = float(np.median((long[:, 2] * 1e6 - a - c * long[:, 0]) / long[:, 1]))
    return TokenCost(prefill_per_token=max(b, 0.0), decode_base=a, decode_per_seq=c)


def calibrate_cost(server: Any, model: str = "lm_whole", rounds: int = 2, seed: int = 0) -> tuple[TokenCost, np.ndarray]:
    """The step cost of `model` (whole prompts) on this machine now, from `rounds` runs of one load:
    six short prompts decoding 12…52 tokens (so 6, 5, … 1 sequences decode) while prompts of 96…352
    tokens arrive; the cost `fit_cost` fits to all their timed steps, and the steps."""
    outs = [12, 20, 28, 36, 44, 52] + [2] * 5
    lens = [8] * 6 + [96, 160, 224, 288, 352]
    arrivals = [0.0] * 6 + [0.05 + 0.06 * j for j in range(5)]
    steps = []
    for r in range(count("rounds", rounds)):
        prompts = [token_prompt(n, (seed + r) * 100 + i) for i, n in enumerate(lens)]
        steps.append(whole_prompt_steps(stream_requests(server, model, prompts, outs, arrivals), lens))
    steps = np.concatenate(steps)
    return fit_cost(steps), steps


# ---- the experiments on the server ----

def mixed_round(server: Any, model: str, n_decode: int = 4, decode_tokens: int = 64,
                long_prompt: int = 420, long_at: Sequence[float] = (0.03, 0.15, 0.27, 0.39),
                seed: int = 0) -> dict[str, Any]:
    """Short-prompt sequences decoding from t = 0 while long prompts arrive at `long_at` (s): the
    decoders' ITL (pooled gaps) as the server sent the tokens (`itl_*`) and as the client got them
    (`client_itl_p99_ms`: plus the client's own stalls), and the long prompts' TTFT, server-side in
    ms, and the first one's prefill in steps as the server ran it (`long_prefill_steps`, `prefill_window`:
    from the step that admitted it to its first token; the decoders surely still run then)."""
    prompts = [token_prompt(8, seed * 100 + i) for i in range(n_decode)]
    prompts += [token_prompt(long_prompt, seed * 100 + 50 + j) for j in range(len(long_at))]
    outs = [decode_tokens] * n_decode + [4] * len(long_at)
    rec = stream_requests(server, model, prompts, outs, [0.0] * n_decode + list(long_at))
    if any(len(rec.server_times[i]) != len(rec.token_times[i]) for i in range(n_decode)):
        raise RuntimeError(f"{model} sends no T_NS with its tokens: the server runs a batchlab older than this notebook's")
    gaps = np.concatenate([np.diff(rec.server_times[i]) for i in range(n_decode)])
    client_gaps = np.concatenate([np.diff(rec.token_times[i]) for i in range(n_decode)])
    return {"model": model, "itl_p50_ms": percentile(gaps, 50, 1e3), "itl_p99_ms": percentile(gaps, 99, 1e3),
            "client_itl_p99_ms": percentile(client_gaps, 99, 1e3),
            "long_ttft_p50_ms": float(np.median(rec.server_ttft[n_decode:])) * 1e3,
            "long_prefill_steps": prefill_window(rec, n_decode, n_decode)[0],
            "decode_e2e_ms": float(np.median(rec.last[:n_decode] - rec.sent[:n_decode])) * 1e3}


def prefix_round(server: Any, model: str, shared: int = 320, own: int = 16, n: int = 8, gap_s: float = 0.0,
                 max_tokens: int = 4, seed: int = 0) -> dict[str, Any]:
    """`n` requests, one every `gap_s` s (0: all at once, concurrent), whose prompts start with the same
    `shared`-token system prompt (new each `seed`) and end with `own` tokens of their own: TTFT
    (server-side), the pool blocks they held at the peak (the server's KV_BLOCKS) and the prompt
    tokens they found in the prefix cache (its CACHED_TOKENS)."""
    system = token_prompt(shared, 7000 + seed)
    prompts = [np.concatenate([system, token_prompt(own + 1, 8000 + seed * 50 + i)[1:]]) for i in range(n)]
    rec = stream_requests(server, model, prompts, [max_tokens] * n, np.arange(n) * gap_s)
    ttft = rec.server_ttft
    return {"model": model, "ttft_p50_ms": float(np.median(ttft)) * 1e3,
            "ttft_first_ms": float(ttft[0]) * 1e3, "ttft_rest_p50_ms": float(np.median(ttft[1:])) * 1e3,
            "peak_kv_blocks": int(step_figures(rec)["KV_BLOCKS"].max()),
            "cached_tokens": int(final_figures(rec)["CACHED_TOKENS"].sum())}


def preemption_round(server: Any, model: str, n: int = 8, prompt: int = 24, max_tokens: int = 64,
                     seed: int = 0) -> dict[str, Any]:
    """`n` generations sent at once: tokens/s over the run (server-side: first send to the last token
    the model sent), the largest and the mean batch (the server's ACTIVE per step), preemptions and
    positions recomputed (from the final responses), end-to-end p50 and the slowest request."""
    rec = stream_requests(server, model, [token_prompt(prompt, seed * 100 + i) for i in range(n)],
                          [max_tokens] * n, np.zeros(n))
    last = np.array([s[-1] for s in rec.server_times])
    e2e = last - rec.sent
    active, final = step_figures(rec)["ACTIVE"], final_figures(rec)
    return {"model": model, "tokens_per_s": float(rec.tokens.sum() / (last.max() - rec.sent.min())),
            "max_active": int(active.max()), "mean_active": float(active.mean()),
            "preemptions": int(final["PREEMPTIONS"].sum()), "recomputed_tokens": int(final["RECOMPUTED_TOKENS"].sum()),
            "e2e_p50_s": float(np.median(e2e)), "e2e_max_s": float(e2e.max())}


# ---- goodput (DistServe): the highest rate at which most requests meet both latency SLOs ----

def slo_for(cost: TokenCost, itl_tokens: int = 96, longest: int = 320, ttft_factor: float = 4.0,
            target: float = 0.9) -> dict[str, float]:
    """The chapter's SLOs (ms), set from the machine's step cost so they sit where they would on any
    machine: a request's ITL p99 at most one step computing `itl_tokens` prompt tokens (a + b·96),
    its TTFT at most `ttft_factor` × the `longest` prompt prefilled alone; `target` of the requests
    must meet both."""
    return {"ttft_ms": ttft_factor * cost.iteration_time(longest, 0) * 1e3,
            "itl_p99_ms": cost.iteration_time(itl_tokens, 0) * 1e3, "target": target}


def serving_workload(n: int, seed: int = 0, every: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """`n` chat turns and documents mixed: prompt lengths (one request in `every` a document of 192–320
    tokens, at seeded places, so even a short run holds its share; the rest chat turns of 16–48) and
    output lengths (12–32 tokens), seeded."""
    n = count("n", n)
    rng = np.random.default_rng(seed)
    long = (np.arange(n) + seed) % count("every", every) == every - 1
    prompts = np.where(long, rng.integers(192, 321, n), rng.integers(16, 49, n))
    return prompts.astype(np.int64), rng.integers(12, 33, n).astype(np.int64)


def slo_attainment(ttft_s: Sequence[float], token_times: Sequence[Sequence[float]],
                   slo: Mapping[str, float]) -> float:
    """The share of requests whose TTFT (s) and whose ITL p99 (gaps of its `token_times`, s) both meet `slo`."""
    ok = []
    for ttft, times in zip(ttft_s, token_times):
        gaps = np.diff(np.asarray(times, float))
        itl = percentile(gaps, 99, empty=0.0)
        ok.append(ttft * 1e3 <= slo["ttft_ms"] and itl * 1e3 <= slo["itl_p99_ms"])
    return float(np.mean(ok)) if ok else float("nan")


def goodput(rows: Sequence[Mapping[str, Any]], target: float) -> dict[str, float]:
    """Per policy: the highest `rate` of a sweep below the first whose `attainment` misses `target`
    (0 if the lowest already misses)."""
    out: dict[str, float] = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        best = 0.0
        for r in sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["rate"]):
            if r["attainment"] < target:
                break
            best = float(r["rate"])
        out[policy] = best
    return out


def _sim(arrivals: np.ndarray, prompts: Sequence[int], outs: Sequence[int], cost: TokenCost,
         max_active: int = MAX_ACTIVE, **settings: Any) -> Any:
    """One engine (lm_stream's max_active unless told) with `settings`, every request counted (no warm-up
    cut), each request's token times recorded: `simulate_continuous`'s result."""
    return simulate_continuous(arrivals, prompts, outs, cost, max_active=max_active, warmup=0.0,
                               record_token_times=True, **settings)


def _simulate(arrivals: np.ndarray, prompts: Sequence[int], outs: Sequence[int], cost: TokenCost,
              policy: str) -> tuple[np.ndarray, list[list[float]]]:
    """One engine under `policy` (`STEP_SETTINGS`): each request's TTFT and token times."""
    res = _sim(arrivals, prompts, outs, cost, **STEP_SETTINGS[policy])
    return res.records["first_token"] - res.records["arrival"], res.extra["token_times"]


def capacity_rps(cost: TokenCost, n: int = 200, seed: int = 0) -> float:
    """Requests/s one engine (whole prompts) finishes of `serving_workload` when all wait at once."""
    prompts, outs = serving_workload(n, seed)
    ttft, times = _simulate(np.zeros(n), prompts, outs, cost, "whole")
    return n / max(t[-1] for t in times)


def sim_goodput(rates: Sequence[float], cost: TokenCost, slo: Mapping[str, float], n: int = 200,
                policies: Sequence[str] = tuple(STEP_SETTINGS), seed: int = 0) -> list[dict[str, Any]]:
    """`serving_workload` at each Poisson `rate` (req/s) under each step policy in the simulator: rows of
    policy, rate, attainment (both SLOs), TTFT p90 and the median of the requests' ITL p99 (ms)."""
    prompts, outs = serving_workload(n, seed)
    rows = []
    for rate in rates:
        arr = poisson_arrivals(rate, n=n, seed=seed + 1)
        for policy in policies:
            ttft, times = _simulate(arr, prompts, outs, cost, policy)
            rows.append({"policy": policy, "rate": float(rate), "attainment": slo_attainment(ttft, times, slo),
                         **_tails(ttft, times)})
    return rows


def _tails(ttft_s: Sequence[float], token_times: Sequence[Sequence[float]]) -> dict[str, float]:
    """TTFT p90 and the median of the requests' ITL p99 (ms)."""
    itl = [percentile(np.diff(t), 99) for t in token_times if len(t) > 1]
    return {"ttft_p90_ms": percentile(ttft_s, 90, 1e3), "itl_p99_median_ms": float(np.median(itl)) * 1e3}


def slo_round(server: Any, model: str, rate: float, cost: TokenCost, slo: Mapping[str, float], n: int = 8,
              seed: int = 0) -> dict[str, Any]:
    """`serving_workload` sent to `model` (a `POLICY_MODEL`) at Poisson `rate`: the share meeting both SLOs
    on the server (TTFT and ITL from its T_NS stamps), the simulator's share for the very send times
    (`predicted`, priced by `cost`), TTFT p90 and the median of the requests' ITL p99 (ms)."""
    policy = {m: p for p, m in POLICY_MODEL.items()}[model]
    lens, outs = serving_workload(n, seed + 10)
    prompts = [token_prompt(int(k), seed * 1000 + i) for i, k in enumerate(lens)]
    arr = np.concatenate([[0.0], poisson_arrivals(rate, n=n - 1, seed=seed + 11)])
    rec = stream_requests(server, model, prompts, [int(o) for o in outs], arr)
    sim_ttft, sim_times = _simulate(rec.sent - rec.sent.min(), lens, outs, cost, policy)
    return {"model": model, "policy": policy, "rate": float(rate),
            "attainment": slo_attainment(rec.server_ttft, rec.server_times, slo),
            "predicted": slo_attainment(sim_ttft, sim_times, slo), **_tails(rec.server_ttft, rec.server_times)}


def interleaved(fn: Callable[..., dict[str, Any]], server: Any, models: Sequence[str], rounds: int = 3,
                **kwargs: Any) -> list[dict[str, Any]]:
    """`fn(server, model, seed=r, **kwargs)` for r in rounds, the models alternating A/B/A/B…"""
    return [{"round": r, **fn(server, m, seed=r, **kwargs)} for r in range(count("rounds", rounds)) for m in models]


def median_spread(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, tuple[float, float, float]]:
    """Per model: (median, min, max) of `key` over its rounds."""
    by = {m: [r[key] for r in rows if r["model"] == m] for m in dict.fromkeys(r["model"] for r in rows)}
    return {m: (float(np.median(x)), float(min(x)), float(max(x))) for m, x in by.items()}


def round_ratios(rows: Sequence[Mapping[str, Any]], key: str, num: str, den: str) -> list[float]:
    """`key` of model `num` over model `den`, round by round (the two ran back to back, so a slow
    spell of the shared machine hits both)."""
    by = {(r["round"], r["model"]): r[key] for r in rows}
    return [by[(k, num)] / by[(k, den)] for k in sorted({r["round"] for r in rows}) if (k, num) in by and (k, den) in by]


# ---- simulations (the same scheduler, priced by a TokenCost) ----

def sim_mixed(max_num_tokens: int | None, cost: TokenCost, n_decode: int = 4, decode_tokens: int = 64,
              long_prompt: int = 420, long_at: Sequence[float] = (0.03, 0.15, 0.27, 0.39),
              step_policy: str | None = None) -> dict[str, Any]:
    """`mixed_round`'s load in the simulator; `max_num_tokens` None: whole prompts in the decodes' step
    (Orca), else chunked to the budget; `step_policy` names another shape (e.g. "prefill_first")."""
    k = len(long_at)
    arr = np.array([0.0] * n_decode + list(long_at))
    policy = step_policy or ("mixed" if max_num_tokens is None else "chunked")
    res = _sim(arr, [8] * n_decode + [long_prompt] * k, [decode_tokens] * n_decode + [4] * k, cost,
               step_policy=policy, max_num_tokens=max_num_tokens)
    b, r = res.batches, res.records
    step_ms = (b["end"] - b["start"]) * 1e3
    gaps = np.concatenate([np.diff(t) for t in res.extra["token_times"][:n_decode]]) * 1e3
    return {"max_num_tokens": max_num_tokens or 0, "step_policy": policy, "step_max_ms": float(step_ms.max()),
            "itl_p50_ms": percentile(gaps, 50), "itl_p99_ms": percentile(gaps, 99),
            "long_ttft_p50_ms": float(np.median(r["first_token"][n_decode:] - r["arrival"][n_decode:])) * 1e3,
            "tokens_per_s": float(r["output_tokens"].sum() / (r["finish"].max() - r["arrival"].min()))}


def sim_prefix(shared: int, cost: TokenCost, prompt: int = 336, n: int = 8, gap_s: float = 0.0) -> dict[str, Any]:
    """`prefix_round`'s load in the simulator (`n` requests `gap_s` apart sharing a `shared`-token prefix),
    with and without prefix caching: hit rate, TTFT p50 and the pool's peak blocks of each."""
    arr = np.arange(n) * gap_s
    plain = _sim(arr, [prompt] * n, [4] * n, cost)
    hit = _sim(arr, [prompt] * n, [4] * n, cost, shared_prefix_tokens=[shared] * n, prefix_caching=True)
    ttft = lambda res: float(np.median(res.records["first_token"] - res.records["arrival"])) * 1e3  # noqa: E731
    cached = hit.extra["cached_tokens"]
    return {"shared": shared, "hit_rate": float(cached.sum() / (n * prompt)),
            "ttft_plain_ms": ttft(plain), "ttft_cached_ms": ttft(hit),
            "peak_blocks_plain": plain.extra["peak_kv_blocks"], "peak_blocks_cached": hit.extra["peak_kv_blocks"]}


def sim_preemption(kv_policy: str, cost: TokenCost, budget: int = 256, n: int = 8, prompt: int = 24,
                   max_tokens: int = 64) -> dict[str, Any]:
    """`preemption_round`'s load in the simulator under `kv_policy` and a pool of `budget` tokens."""
    res = _sim(np.zeros(n), [prompt] * n, [max_tokens] * n, cost, kv_token_budget=budget, kv_policy=kv_policy)
    r, b = res.records, res.batches
    e2e = r["finish"] - r["arrival"]
    return {"kv_policy": kv_policy, "budget": budget,
            "tokens_per_s": float(r["output_tokens"].sum() / r["finish"].max()),
            "max_active": int(b["size"].max()), "preemptions": int(r["preemptions"].sum()),
            "recomputed_tokens": int(res.extra["recomputed_tokens"].sum()),
            "e2e_p50_s": float(np.median(e2e)), "e2e_max_s": float(e2e.max())}


def disaggregation(rate: float, transfer_ms: float, cost: TokenCost, n: int = 400, prompt: int = 420,
                   output: int = 64, first_token: str = "prefill", chunk: int = 128,
                   seed: int = 0) -> dict[str, Any]:
    """Two engines, Poisson arrivals at `rate` req/s; TTFT p99, TPOT p99, the pooled ITL p99 and the
    longest gap (ms) of three set-ups (simulation only). Co-located: each engine takes every other request and does its
    prefill and decode, whole prompts (``co_``) or chunked to `chunk` tokens a step (``chunked_``).
    Disaggregated (``dis_``): one engine only prefills, the KV moves in `transfer_ms`, the other only
    decodes. Who returns the first token decides where the transfer shows: ``first_token="prefill"``
    (DistServe: the prefill engine emits it, the transfer delays the second token: TPOT and ITL) or
    ``"decode"`` (vLLM's disaggregated-prefill proxy streams every token from the decode engine: the
    transfer lands in TTFT)."""
    if first_token not in ("prefill", "decode"):
        raise ValueError(f"first_token must be 'prefill' or 'decode', got {first_token!r}")
    arr = poisson_arrivals(rate, n=n, seed=seed)
    row: dict[str, Any] = {"rate": rate, "transfer_ms": transfer_ms, "first_token": first_token}
    for label, step in (("co", {}), ("chunked", {"step_policy": "chunked", "max_num_tokens": chunk})):
        runs = [_sim(half, [prompt] * half.size, [output] * half.size, cost, max_active=16, **step)
                for half in (arr[0::2], arr[1::2])]
        arrival = np.concatenate([res.records["arrival"] for res in runs])
        row.update(_latency_row(label, arrival, [t for res in runs for t in res.extra["token_times"]], output))
    pre = _sim(arr, [prompt] * n, [1] * n, cost, max_active=16).records
    ready = pre["first_token"] + transfer_ms / 1e3
    order = np.argsort(ready, kind="stable")
    emits_first = first_token == "decode"  # the decode engine emits the first token too
    dec = _sim(ready[order], [1] * n, [output - (0 if emits_first else 1)] * n, cost, max_active=16)
    times: list[list[float]] = [[] for _ in range(n)]
    for k, i in enumerate(order):
        times[i] = ([] if emits_first else [float(pre["first_token"][i])]) + list(dec.extra["token_times"][k])
    row.update(_latency_row("dis", arr, times, output))
    return row


def _latency_row(label: str, arrival: np.ndarray, times: Sequence[Sequence[float]], output: int) -> dict[str, float]:
    """TTFT p99, TPOT p99, the pooled ITL p99 and the longest gap (ms) of requests with these token times."""
    p99 = lambda x: percentile(x, 99, 1e3)  # noqa: E731
    first, last = np.array([t[0] for t in times]), np.array([t[-1] for t in times])
    gaps = np.concatenate([np.diff(t) for t in times])
    return {f"{label}_ttft_p99_ms": p99(first - arrival), f"{label}_tpot_p99_ms": p99((last - first) / (output - 1)),
            f"{label}_itl_p99_ms": p99(gaps), f"{label}_itl_max_ms": float(gaps.max()) * 1e3}
