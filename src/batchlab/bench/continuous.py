"""`python -m batchlab.bench continuous`: one mixed-length generation workload, four ways to batch it.

The same requests (prompts, and output lengths drawn from a capped exponential, generated with
IGNORE_EOS so every way produces exactly as many tokens) go through

* `generate`     request-level (static) batching: the dynamic batcher forms a batch and the model
                 decodes it until its longest member is done; finished rows are padding;
* `lm_step`      a client-driven sequence (Triton's sequence batcher, direct): one request per
                 decode step, the client sending the next step when it has the last token;
* `lm_iterative` Triton's iterative sequences: one request per generation, the model streams a
                 token per execution and hands the request back to the scheduler (RESCHEDULE);
* `lm_stream`    continuous batching inside a decoupled model (the vLLM / TensorRT-LLM way).

Each runs closed-loop at the same concurrency (the models' batch limit). Greedy decoding is
batch-invariant, so every way must return the same tokens for the same request: the benchmark
checks that too. Reported per way: tokens/s, TTFT p50/p99, per-token latency p50/p99
(latency / tokens, the "normalised latency" of Orca and vLLM, defined for all four; plus the
inter-token time after the first token for the streaming ones), and η = useful token-steps /
computed token-slots.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Callable

import numpy as np

from batchlab.bench.common import CpuWatch, Timer, bench_server, log, machine, r3, verdict
from batchlab.lm import BOS_ID, VOCAB_SIZE
from batchlab.load import RequestSpec, SequenceSpec, run_closed_loop
from batchlab.sim.lengths import capped_exponential

MODELS = ("generate", "lm_step", "lm_iterative", "lm_stream")


def workload(n: int, mean_tokens: float, cap: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """`n` prompts (8-24 real tokens after <bos>) and their output lengths (capped exponential)."""
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(n):
        k = int(rng.integers(8, 25))
        prompts.append(np.concatenate([[BOS_ID], rng.integers(3, VOCAB_SIZE, size=k)]).astype(np.int32))
    lengths = capped_exponential(mean_tokens, cap).sample(n, rng)
    return prompts, lengths


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


def _flag(v: bool) -> np.ndarray:
    return np.array([[v]], dtype=bool)


def source(model: str, prompts: list[np.ndarray], lengths: np.ndarray,
           col: Collector | None) -> Callable[[int], RequestSpec | SequenceSpec]:
    """Request i of the workload, in the form `model` takes."""
    n = len(prompts)

    def generate(i: int) -> RequestSpec:
        k = i % n
        p, m = prompts[k], int(lengths[k])

        def check(o: dict) -> str | None:
            got = int(o["NUM_TOKENS"].reshape(-1)[0])
            if got != m:
                return f"{got} tokens, expected {m}"
            if col is not None:
                col.put(i, o["TOKENS"].reshape(-1)[:m].tolist())
                col.generate.append((int(o["BATCH_STEPS"].reshape(-1)[0]), int(o["BATCH_SIZE"].reshape(-1)[0])))
            return None
        return RequestSpec({"PROMPT": p[None, :], "MAX_TOKENS": np.array([[m]], np.int32),
                            "IGNORE_EOS": _flag(True)}, check=check, count_tokens=_num_tokens)

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
            if batched:  # lm_iterative: max_batch_size 8, a sequence started by the client
                inputs = {"PROMPT": p[None, :], "MAX_TOKENS": np.array([[m]], np.int32), "IGNORE_EOS": _flag(True)}
                return RequestSpec(inputs, check=check, expected_tokens=m, sequence_start=True)
            inputs = {"PROMPT": p, "MAX_TOKENS": np.array([m], np.int32), "IGNORE_EOS": np.array([True])}
            return RequestSpec(inputs, check=check, expected_tokens=m)
        return make

    return {"generate": generate, "lm_step": lm_step, "lm_iterative": streamed(True),
            "lm_stream": streamed(False)}[model]


def _protocol(model: str) -> str:
    return "grpc-stream" if model in ("lm_iterative", "lm_stream") else "grpc"


def decode_step_cost(model: str, rep: Any, col: Collector) -> dict[str, Any]:
    """How long one decode step took, over how many sequences: the mechanism behind the speedup.

    `generate`: execution time (statistics extension) over the executions' decode steps (BATCH_STEPS
    per request / BATCH_SIZE), rows = slot-steps per step (padding included). The others: the
    median gap between a sequence's tokens, rows = the step's batch as the model reports it
    (token-weighted mean).
    """
    if model == "generate":
        if not col.generate or rep.server is None:
            return {}
        exec_steps = sum(st / max(b, 1) for st, b in col.generate)
        slot_steps = sum(st for st, _ in col.generate)
        exec_ms = sum(slot.get("compute_infer", (0, 0))[1] for slot in rep.server.batches.values()) / 1e6
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


def run(n_requests: int = 240, concurrency: int = 8, mean_tokens: float = 24.0, cap: int = 128,
        seed: int = 0, warmup_requests: int = 8) -> dict[str, Any]:
    """Run the four ways on one workload; return the benchmark's JSON object."""
    clock = Timer()
    prompts, lengths = workload(n_requests, mean_tokens, cap, seed)
    results: dict[str, Any] = {}
    tokens_of: dict[str, dict[int, tuple[int, int]]] = {}
    with bench_server(MODELS) as server, CpuWatch(server) as watch:
        log(f"server ready in {clock():.0f} s; workload: {n_requests} requests, "
            f"{int(lengths.sum())} output tokens (mean {lengths.mean():.1f}, max {lengths.max()})")
        for model in MODELS:
            col = Collector()
            src = source(model, prompts, lengths, col)
            warm = source(model, prompts[::-1], lengths[::-1], None)
            run_closed_loop(server, model, warm, concurrency=concurrency, n_requests=warmup_requests,
                            protocol=_protocol(model), stats=False, progress=False)
            rep = run_closed_loop(server, model, src, concurrency=concurrency, n_requests=n_requests,
                                  protocol=_protocol(model), progress=None, label=model,
                                  record_token_times=model != "generate")
            eta, eta_src = _eta(model, rep, [st for st, _ in col.generate])
            lat = rep.records.latency
            norm = lat / np.where(rep.records.tokens > 0, rep.records.tokens, np.nan) * 1e3
            norm = norm[np.isfinite(norm)]
            entry = {
                "ok": rep.n_ok, "errors": rep.n_errors, "error_kinds": rep.records.errors(),
                "tokens": rep.tokens, "wall_s": r3(rep.wall_s), "tokens_per_s": r3(rep.tokens_per_s),
                "requests_per_s": r3(rep.throughput_rps),
                "ttft_ms": {"p50": r3(rep.ttft_ms()["p50"]), "p99": r3(rep.ttft_ms()["p99"])},
                "per_token_latency_ms": {"p50": r3(float(np.percentile(norm, 50))) if norm.size else None,
                                         "p99": r3(float(np.percentile(norm, 99))) if norm.size else None},
                "latency_ms": {"p50": r3(rep.latency_ms()["p50"]), "p99": r3(rep.latency_ms()["p99"])},
                "eta": r3(eta), "eta_source": eta_src,
            }
            if model != "generate":
                tp = rep.tpot_ms()
                entry["inter_token_ms"] = {"p50": r3(tp["p50"]), "p99": r3(tp["p99"])}
            if rep.server is not None and model != "lm_stream":
                entry["server_mean_batch_size"] = r3(rep.server.mean_batch_size)
            entry["decode_step"] = decode_step_cost(model, rep, col)
            results[model] = entry
            tokens_of[model] = col.tokens
            log(f"{model}: {entry['tokens_per_s']} tokens/s, TTFT p50 {entry['ttft_ms']['p50']} ms, "
                f"eta {entry['eta']} ({clock():.0f} s)")
    ref = tokens_of["generate"]
    identical = {m: (tokens_of[m] == ref and len(ref) == n_requests) for m in MODELS}
    static = results["generate"]["tokens_per_s"]
    best = max(("lm_step", "lm_iterative", "lm_stream"), key=lambda m: results[m]["tokens_per_s"] or 0)
    mach = machine(watch)
    return {
        "benchmark": "continuous",
        "workload": {"requests": n_requests, "concurrency": concurrency, "output_tokens": int(lengths.sum()),
                     "output_length": {"distribution": "capped exponential", "mean": mean_tokens, "cap": cap,
                                       "sample_mean": r3(float(lengths.mean())), "sample_max": int(lengths.max())},
                     "prompt_tokens": "9-25 (bos + 8-24 random ids)", "decoding": "greedy, IGNORE_EOS", "seed": seed},
        "results": results,
        "same_tokens_as_generate": identical,
        "best_continuous": best,
        "speedup_vs_static": r3(results[best]["tokens_per_s"] / static) if static else None,
        "padding_bound_speedup": r3(1 / results["generate"]["eta"]) if results["generate"]["eta"] else None,
        "note": ("padding_bound_speedup = 1 / eta(generate): what removing padding alone would give at equal cost "
                 "per row-step; decode_step.ms_per_row shows whether a row-step costs the same in a bigger batch"),
        "goal": "speedup_vs_static >= 2",
        **verdict(bool(static and results[best]["tokens_per_s"] / static >= 2), mach),
        "elapsed_s": r3(clock()),
        "machine": mach,
    }
