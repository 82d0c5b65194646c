"""`python -m batchlab.bench continuous`: static vs continuous batching on chat-shaped generations.

Ways (greedy, IGNORE_EOS, so all produce the same tokens): `generate` (request-level), `lm_iterative`,
`lm_stream` and, with ``--lm-step``, `lm_step`. Output lengths follow `CHAT_TRACE` divided by `scale`;
by default every way runs on the `decode` model's wider LM (`LM_WHY`). Each round runs every way on a
fresh workload in a rotated order; the headline is the median over rounds of best continuous tokens/s
over generate's.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from batchlab._validate import count, positive
from batchlab.bench.common import CpuWatch, Timer, bench_server, int_parameters, log, machine, r3, verdict
from batchlab.config_pbtxt import edit_config, load_config_text, stage_model, to_text
from batchlab.lm import BOS_ID, VOCAB_SIZE, LMConfig, ToyLM
from batchlab.load import RequestSpec, SequenceSpec, run_closed_loop
from batchlab.models._gen_inputs import DEFAULT_MAX_TOKENS_LIMIT
from batchlab.models.requests import generate_inputs
from batchlab.server import ExternalServer
from batchlab.sim.lengths import CappedLognormal, LengthDist, capped_lognormal
from batchlab.sim.summary import percentile_summary

CONTINUOUS = ("lm_iterative", "lm_stream")
"""The continuous ways run by default; `lm_step` joins them with ``with_lm_step``."""

PROMPT_TOKENS = (8, 24)
"""Real tokens after <bos> in a prompt (uniform): prompts of 9-25 positions."""

CHAT_TRACE = {
    "name": "Azure LLM inference trace 2023, conversation (GeneratedTokens)",
    "file": "github.com/Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv",
    "commit": "b469a113cedca53ddc3bdea71a143dc4b7d8700c",
    "paper": ("Patel et al., Splitwise: Efficient generative LLM inference using phase splitting, ISCA 2024 "
              "(the trace's accompanying paper)"),
    "requests": 19366, "median": 129, "mean": 211.1, "p90": 424, "p99": 601, "max": 1000,
}
"""Output-length statistics computed from the trace file (all 19,366 rows; none has 0 tokens)."""

LMS = ("decode", "default")
"""`lm` choices: the `decode` model's width (staged copies of the ways, the default) or the course's own LM."""

WIDTH_KEYS = ("d_model", "d_ff")

LM_WHY = (
    "a continuous way streams a response per token per sequence (Python backend IPC, a gRPC message, the "
    "client's callback, all on the same cores). With the course's default LM (its weights within the CPU "
    "caches) its step is so cheap that this decides the comparison (continuous_default_lm.json). An LLM's "
    "decode step is weight-bound: a 7B model's reads 14 GB of weights, about 7 ms even at an A100's 2 TB/s. "
    "The `decode` model's width (weights beyond the caches; `weights_mb` below) restores that proportion on a CPU. "
    "--lm default measures the course's own models")


def decode_width() -> dict[str, int]:
    """d_model / d_ff of the `decode` model's config.pbtxt: the one place the decode-regime width is set."""
    return int_parameters("decode", WIDTH_KEYS)


def stage_width(dest: str | Path, models: tuple[str, ...], width: dict[str, int]) -> Path:
    """Copies of `models` in repository `dest`, their LM built with `width` (parameters d_model / d_ff)."""
    change = {"parameters": {k: f'string_value: "{int(v)}"' for k, v in width.items()}}
    for m in models:
        stage_model(dest, m, to_text(edit_config(load_config_text(m), change)), m)
    return Path(dest)


def lm_description(lm: str, external: bool) -> dict[str, Any]:
    """The JSON's `lm` entry: which LM the ways ran, its width and weights, and why."""
    if external:
        return {"width": "as served at TRITON_URL", "why": LM_WHY}
    width = decode_width() if lm == "decode" else {k: getattr(LMConfig(), k) for k in WIDTH_KEYS}
    model = ToyLM(LMConfig(**width))
    return {"width": lm, **width, "weights_mb": r3(model.weight_bytes / 1e6),
            "models": "staged copies of the course's configs with these parameters" if lm == "decode"
            else "the course's models as they are", "why": LM_WHY}

Z90 = 1.2815515655446004
"""Standard normal 90th percentile: a lognormal's p90/p50 = exp(Z90 * sigma)."""


def chat_lengths(scale: float = 8.0) -> CappedLognormal:
    """The trace's output lengths as a capped lognormal (its median and p90/p50), divided by `scale`."""
    sigma = math.log(CHAT_TRACE["p90"] / CHAT_TRACE["median"]) / Z90
    return capped_lognormal(CHAT_TRACE["median"] / scale, sigma, max(1, math.ceil(CHAT_TRACE["max"] / scale)))


def min_scale() -> float:
    """Smallest `scale` whose cap the models accept: MAX_TOKENS <= 256, prompt + output <= 512 positions."""
    room = min(LMConfig().max_seq_len - (PROMPT_TOKENS[1] + 1), DEFAULT_MAX_TOKENS_LIMIT)
    return CHAT_TRACE["max"] / room


def workload(n: int, dist: LengthDist, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """`n` prompts (8-24 real tokens after <bos>) and their output lengths drawn from `dist`."""
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(n):
        k = int(rng.integers(PROMPT_TOKENS[0], PROMPT_TOKENS[1] + 1))
        prompts.append(np.concatenate([[BOS_ID], rng.integers(3, VOCAB_SIZE, size=k)]).astype(np.int32))
    lengths = dist.sample(n, rng)
    return prompts, lengths


def length_summary(lengths: np.ndarray) -> dict[str, Any]:
    """mean / median / p90 / max of a sample of output lengths."""
    s = percentile_summary(lengths, scale=1.0)
    return {"n": int(np.size(lengths)), "mean": r3(s["mean"]), "median": r3(s["p50"]), "p90": r3(s["p90"]),
            "max": int(s["max"])}


class Collector:
    """Keeps each request's generated tokens (request index -> checksum) for the cross-check."""

    def __init__(self) -> None:
        self.tokens: dict[int, tuple[int, int]] = {}
        self.rows: list[int] = []  # per token: sequences in the step that produced it (model output)
        self.generate: list[tuple[int, int]] = []  # per generate request: (BATCH_STEPS, BATCH_SIZE)

    def put(self, i: int, toks: list[int]) -> None:
        """Remember request i's tokens (count and CRC-32)."""
        arr = np.asarray(toks, dtype=np.int32)
        self.tokens[i] = (len(arr), zlib.crc32(arr.tobytes()))


def _num_tokens(o: dict) -> int:
    return int(o["NUM_TOKENS"].reshape(-1)[0])


def source(model: str, prompts: list[np.ndarray], lengths: np.ndarray,
           col: Collector | None) -> Callable[[int], RequestSpec | SequenceSpec]:
    """Request i of the workload, in the form `model` takes."""
    n = len(prompts)

    def generate(i: int) -> RequestSpec:
        k = i % n
        p, m = prompts[k], int(lengths[k])

        def check(o: dict) -> str | None:
            got = _num_tokens(o)
            if got != m:
                return f"{got} tokens, expected {m}"
            if col is not None:
                col.put(i, o["TOKENS"].reshape(-1)[:m].tolist())
                col.generate.append((int(o["BATCH_STEPS"].reshape(-1)[0]), int(o["BATCH_SIZE"].reshape(-1)[0])))
            return None
        return RequestSpec(generate_inputs(p, m, ignore_eos=True), check=check, count_tokens=_num_tokens)

    def lm_step(i: int) -> SequenceSpec:
        k = i % n
        p, m = prompts[k], int(lengths[k])

        def step(j: int, prev: dict | None) -> RequestSpec:
            if j == 0:
                return RequestSpec({"TOKENS": p[None, :]})
            return RequestSpec({"TOKENS": prev["TOKEN"].reshape(1, 1).astype(np.int32)})

        def check(history: list[dict]) -> str | None:
            if col is not None:
                col.put(i, [int(h["TOKEN"].reshape(-1)[0]) for h in history])
                col.rows.extend(int(h["BATCH_SIZE"].reshape(-1)[0]) for h in history)
            return None if len(history) == m else f"{len(history)} steps, expected {m}"
        return SequenceSpec(step=step, sequence_id=0, n_steps=m, check=check)

    def streamed(batched: bool):
        rows_name = "BATCH_SIZE" if batched else "ACTIVE"

        def make(i: int) -> RequestSpec:
            k = i % n
            p, m = prompts[k], int(lengths[k])

            def check(outs: list[dict]) -> str | None:
                if col is not None:
                    col.put(i, [int(o["TOKEN"].reshape(-1)[0]) for o in outs])
                    col.rows.extend(int(o[rows_name].reshape(-1)[0]) for o in outs)
                return None
            # lm_iterative (batched): max_batch_size 8, a sequence started by the client
            return RequestSpec(generate_inputs(p, m, ignore_eos=True, batched=batched), check=check,
                               expected_tokens=m, sequence_start=batched)
        return make

    return {"generate": generate, "lm_step": lm_step, "lm_iterative": streamed(True),
            "lm_stream": streamed(False)}[model]


def _protocol(model: str) -> str:
    return "grpc-stream" if model in ("lm_iterative", "lm_stream") else "grpc"


def decode_step_cost(model: str, rep: Any, col: Collector) -> dict[str, Any]:
    """ms per decode step, rows per step and ms per row: for `generate` from the statistics extension
    (padding rows included), for the others from the median gap between a sequence's tokens."""
    if model == "generate":
        if not col.generate or rep.server is None:
            return {}
        exec_steps = sum(st / max(b, 1) for st, b in col.generate)
        slot_steps = sum(st for st, _ in col.generate)
        exec_ms = sum(rep.server.batch_histogram()[b] * ms for b, ms in rep.server.batch_service_ms(infer_only=True).items())
        ms, rows = exec_ms / exec_steps, slot_steps / exec_steps
    else:
        gaps = rep.records.inter_token()
        if not gaps.size or not col.rows:
            return {}
        ms, rows = float(np.median(gaps)) * 1e3, float(np.mean(col.rows))
    return {"ms_per_step": r3(ms), "rows_per_step": r3(rows), "ms_per_row": r3(ms / rows)}


def _eta(model: str, rep: Any, generate_steps: list[int]) -> tuple[float, str]:
    tokens = rep.tokens
    if model == "generate":
        steps = sum(generate_steps)
        return (tokens / steps if steps else math.nan), "model outputs: sum NUM_TOKENS / sum BATCH_STEPS"
    if model in ("lm_step", "lm_iterative"):
        slots = rep.server.inference_count if rep.server else 0
        return (tokens / slots if slots else math.nan), "tokens / slots executed (statistics extension)"
    return 1.0, "model design: each step computes only active sequences"


def _spread(values: list[float]) -> dict[str, Any]:
    v = [x for x in values if x is not None and math.isfinite(x)]
    if not v:
        return {"median": None, "min": None, "max": None, "all": values}
    return {"median": r3(float(np.median(v))), "min": r3(min(v)), "max": r3(max(v)), "all": [r3(x) for x in values]}


def _measure(server: Any, model: str, prompts: list[np.ndarray], lengths: np.ndarray,
             concurrency: int, progress: bool = True) -> tuple[dict[str, Any], dict[int, tuple[int, int]]]:
    """One way on one round's workload: its entry for the JSON, and its tokens for the cross-check."""
    col = Collector()
    rep = run_closed_loop(server, model, source(model, prompts, lengths, col), concurrency=concurrency,
                          n_requests=len(prompts), protocol=_protocol(model),
                          progress=None if progress else False, label=model,
                          record_token_times=model != "generate")
    eta, eta_src = _eta(model, rep, [st for st, _ in col.generate])
    lat = rep.records.latency
    norm = lat / np.where(rep.records.tokens > 0, rep.records.tokens, np.nan) * 1e3
    norm = norm[np.isfinite(norm)]
    entry = {
        "ok": rep.n_ok, "errors": rep.n_errors, "error_kinds": rep.records.errors(),
        "tokens": rep.tokens, "wall_s": r3(rep.wall_s), "tokens_per_s": r3(rep.tokens_per_s),
        "ttft_ms": {"p50": r3(rep.ttft_ms()["p50"]), "p99": r3(rep.ttft_ms()["p99"])},
        "per_token_latency_ms": {k: r3(v) for k, v in percentile_summary(norm, scale=1.0).items() if k in ("p50", "p99")},
        "eta": r3(eta), "eta_source": eta_src,
    }
    if rep.server is not None and model != "lm_stream":
        entry["server_mean_batch_size"] = r3(rep.server.mean_batch_size)
    entry["decode_step"] = decode_step_cost(model, rep, col)
    return entry, col.tokens


def round_summary(rounds: list[dict[str, Any]], models: tuple[str, ...]) -> dict[str, Any]:
    """The headline figures over rounds (pure): median, min and max of the per-round speedup (best
    continuous tokens/s / generate's), the padding bound 1/η and `row_cost_ratio` (generate's
    ms per row / the best way's); the rounds gain their per-round figures."""
    cont = [m for m in models if m != "generate"]
    ratios, bounds, of_bound, best, row_ratios = [], [], [], [], []
    for rd in rounds:
        res = rd["results"]
        static = res["generate"]["tokens_per_s"]
        b = max(cont, key=lambda m: res[m]["tokens_per_s"] or 0)
        ratio = res[b]["tokens_per_s"] / static if static else math.nan
        eta = res["generate"]["eta"]
        bound = 1.0 / eta if eta else math.nan
        rd.update(best_continuous=b, speedup_vs_static=r3(ratio), padding_bound_speedup=r3(bound),
                  speedup_over_padding_bound=r3(ratio / bound) if math.isfinite(bound) else None)
        g_row, b_row = res["generate"]["decode_step"].get("ms_per_row"), res[b]["decode_step"].get("ms_per_row")
        if g_row and b_row:
            rd["row_cost_ratio"] = r3(g_row / b_row)
            rd["speedup_from_eta_and_row_cost"] = r3(bound * g_row / b_row)
            row_ratios.append(g_row / b_row)
        ratios.append(ratio)
        bounds.append(bound)
        of_bound.append(ratio / bound)
        best.append(b)
    per_model = {}
    for m in models:
        steps = [rd["results"][m]["decode_step"] for rd in rounds]
        per_model[m] = {"tokens_per_s": _spread([rd["results"][m]["tokens_per_s"] for rd in rounds]),
                        "eta": _spread([rd["results"][m]["eta"] for rd in rounds]),
                        "decode_step_median": {k: r3(float(np.median([s[k] for s in steps if k in s])))
                                               for k in ("ms_per_step", "rows_per_step", "ms_per_row")
                                               if any(k in s for s in steps)}}
    same = {m: all(rd["same_tokens_as_generate"][m] for rd in rounds) for m in models}
    errors = sum(rd["results"][m]["errors"] for rd in rounds for m in models)
    sp = _spread(ratios)
    return {"per_model": per_model, "same_tokens_as_generate": same, "errors": errors,
            "best_continuous_per_round": best, "speedup_vs_static": sp["median"],
            "speedup_vs_static_spread": {k: sp[k] for k in ("min", "max", "all")},
            "padding_bound_speedup": _spread(bounds), "speedup_over_padding_bound": _spread(of_bound),
            "row_cost_ratio": _spread(row_ratios)}


def run(rounds: int = 7, n_requests: int = 96, concurrency: int = 8, scale: float = 8.0, seed: int = 0,
        warmup_requests: int = 8, with_lm_step: bool = False, lm: str = "decode",
        progress: bool = True) -> dict[str, Any]:
    """Run generate and the continuous ways interleaved over `rounds`; return the benchmark's JSON object.

    `lm`: "decode" (the `decode` model's wider LM) or "default" (the course's models); ignored with TRITON_URL.
    `progress`: progress bars and a line per round on stderr (a chapter turns them off).
    """
    say = log if progress else (lambda msg: None)
    if lm not in LMS:
        raise ValueError(f"--lm must be one of {', '.join(LMS)}, not {lm!r}")
    rounds = count("rounds", rounds)
    n_requests = count("requests", n_requests)
    concurrency = count("concurrency", concurrency)
    scale = positive("scale", scale)
    if scale < min_scale():
        raise ValueError(f"--scale must be >= {min_scale():.2f}: the trace's longest output (1000 tokens) / scale "
                         f"must stay within the models' MAX_TOKENS limit ({DEFAULT_MAX_TOKENS_LIMIT}) and the toy LM's "
                         f"{LMConfig().max_seq_len} positions")
    models = ("generate",) + (("lm_step",) if with_lm_step else ()) + CONTINUOUS
    dist = chat_lengths(scale)
    clock = Timer()
    out_rounds: list[dict[str, Any]] = []
    all_lengths: list[np.ndarray] = []
    with contextlib.ExitStack() as stack:
        repo = None
        if lm == "decode":  # a private (0700) folder, removed at the end
            repo = stage_width(stack.enter_context(tempfile.TemporaryDirectory(prefix="batchlab-bench-")),
                               models, decode_width())
        server = stack.enter_context(bench_server(models, repo=repo))
        watch = stack.enter_context(CpuWatch(server))
        lm_entry = lm_description(lm, isinstance(server, ExternalServer))
        say(f"server ready in {clock():.0f} s ({lm_entry['width']} LM); {rounds} rounds x {len(models)} ways x "
            f"{n_requests} requests")
        wp, wl = workload(warmup_requests, dist, seed + 10_000)
        for model in models:
            run_closed_loop(server, model, source(model, wp, wl, None), concurrency=concurrency,
                            n_requests=warmup_requests, protocol=_protocol(model), stats=False, progress=False)
        for r in range(rounds):
            prompts, lengths = workload(n_requests, dist, seed + r)
            all_lengths.append(lengths)
            order = models[r % len(models):] + models[:r % len(models)]
            results, tokens_of = {}, {}
            for model in order:
                results[model], tokens_of[model] = _measure(server, model, prompts, lengths, concurrency, progress)
            ref = tokens_of["generate"]
            same = {m: (tokens_of[m] == ref and len(ref) == n_requests) for m in models}
            out_rounds.append({"round": r, "seed": seed + r, "order": list(order), "output_tokens": int(lengths.sum()),
                               "output_length_sample": length_summary(lengths),
                               "results": {m: results[m] for m in models}, "same_tokens_as_generate": same})
            tps = ", ".join(f"{m} {results[m]['tokens_per_s']:.0f}" for m in models)
            say(f"round {r + 1}/{rounds}: tokens/s {tps}; eta(generate) {results['generate']['eta']} ({clock():.0f} s)")
    summary = round_summary(out_rounds, models)
    errors = summary.pop("errors")
    per_model = summary.pop("per_model")
    mach = machine(watch)
    sp = summary["speedup_vs_static"]
    measured_met = bool(sp is not None and sp >= 2 and errors == 0 and all(summary["same_tokens_as_generate"].values()))
    return {
        "benchmark": "continuous",
        "workload": {
            "rounds": rounds, "requests_per_round": n_requests, "concurrency": concurrency, "models": list(models),
            "fresh_workload_per_round": True, "order": "rotated each round",
            "output_length": {
                "distribution": "capped lognormal", "name": "chat replies (Azure conversation trace), scaled",
                "parameters": {"median": r3(dist.median), "sigma": r3(dist.sigma), "cap": dist.cap, "lo": dist.lo},
                "exact_mean": r3(dist.mean),
                "source": CHAT_TRACE,
                "scaling": (f"lognormal with the trace's median ({CHAT_TRACE['median']}) and p90/p50 "
                            f"({CHAT_TRACE['p90']}/{CHAT_TRACE['median']}, sigma = ln(p90/p50)/1.2816), every length "
                            f"divided by scale = {scale:g}, cap = trace max / scale; the shape (p90/p50, max/median) "
                            "is kept, the absolute lengths shrunk to the toy LM's 512 positions and a run of minutes"),
                "scale": scale,
                "sample": length_summary(np.concatenate(all_lengths)),
            },
            "prompt_tokens": "9-25 (bos + 8-24 random ids)", "decoding": "greedy, IGNORE_EOS", "seed": seed,
            "lm": lm_entry},
        "rounds": out_rounds,
        "results": per_model,
        **summary,  # same_tokens_as_generate, best_continuous_per_round, speedup_vs_static (+ spread), ...
        "note": ("speedup_vs_static = median over rounds of (best continuous tokens/s / generate tokens/s) in the "
                 "same round; padding_bound_speedup = 1 / eta(generate): what removing padding alone would give at "
                 "equal cost per row-step; row_cost_ratio = generate's decode_step.ms_per_row / the best continuous "
                 "way's, so speedup ~ padding_bound_speedup x row_cost_ratio (above 1: the continuous step is wider "
                 "and a weight-bound step's cost per row falls with its width)"),
        "goal": "speedup_vs_static (median over rounds) >= 2, every token as generate's, no errors",
        **verdict(measured_met, mach),
        "elapsed_s": r3(clock()),
        "machine": mach,
    }
