"""Benchmark of the toy LM and the `embed` model; prints one JSON object.

1. Decode-step time t(B) of `batchlab.lm.ToyLM` for B = 1, 2, 4, …, 64 (in-process, OpenBLAS
   threads as in the server models), the least-squares fit t(B) = a + b·B, and the per-item cost
   t(B)/B next to t(1). Also t(1) on numpy's GEMV path, for comparison.
2. The KV bytes per token of the toy LM next to Llama-2-7B and Llama-3-8B.
3. With the server (skip with --no-server): startup time of the whole course model repository,
   then 16 concurrent gRPC clients against `embed` and `embed_nobatch` for --duration s each:
   throughput, and the batch-size histogram read from the statistics extension (`batch_stats`).

Usage: python benchmarks/bench_lm.py [--repeats 30] [--duration 5] [--clients 16]
       [--blas-threads 1] [--no-server]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import numpy as np

from batchlab.lm import LMConfig, ToyLM, blas, decode_step_times, kv_report
from batchlab.lm.vocab import ARTICLE, encode
from batchlab.theory.formulas import fit_affine


def decode_benchmark(repeats: int) -> dict:
    """t(B), the linear fit and the GEMV comparison, in milliseconds."""
    lm = ToyLM.default()
    times = decode_step_times(lm, repeats=repeats)
    a, b = fit_affine(list(times), list(times.values()))
    gemv = decode_step_times(ToyLM(LMConfig(always_gemm=False)), [1], repeats=repeats)[1]
    return {
        "weights_MB": round(lm.weight_bytes / 1e6, 2),
        "context_tokens": 32,
        "t_ms": {str(k): round(v * 1e3, 3) for k, v in times.items()},
        "per_item_ms": {str(k): round(v * 1e3 / k, 3) for k, v in times.items()},
        "fit_ms": {"a": round(a * 1e3, 3), "b": round(b * 1e3, 4)},
        "t32_per_item_over_t1": round(times[32] / 32 / times[1], 3),
        "t1_gemv_path_ms": round(gemv * 1e3, 3),
    }


def embed_rows(n: int, seed: int = 0) -> np.ndarray:
    """Fixed-length rows of article text (padded with <pad>)."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, 16), np.int32)
    for r in range(n):
        k = int(rng.integers(2, 17))
        start = int(rng.integers(0, len(ARTICLE) - k))
        ids = encode(ARTICLE[start:start + k - 1])
        rows[r, :ids.size] = ids
    return rows


def batch_histogram(server, model: str) -> dict[int, int]:
    """Executions per batch size (statistics extension)."""
    stats = server.http_client().get_inference_statistics(model_name=model)
    return {int(i["batch_size"]): int(i["compute_infer"]["count"])
            for i in stats["model_stats"][0].get("batch_stats", [])}


def load_embed(server, model: str, clients: int, duration: float) -> dict:
    """`clients` closed-loop gRPC clients for `duration` s; throughput and batch histogram."""
    import tritonclient.grpc as grpcclient

    rows = embed_rows(256)
    before = batch_histogram(server, model)
    stop = time.monotonic() + duration
    counts = [0] * clients
    errors: list[str] = []

    def worker(k: int) -> None:
        client = server.grpc_client()
        i = k
        while time.monotonic() < stop:
            x = grpcclient.InferInput("TOKENS", [1, 16], "INT32")
            x.set_data_from_numpy(rows[i % len(rows)][None])
            try:
                client.infer(model, [x])
                counts[k] += 1
            except Exception as exc:  # reported, not fatal
                errors.append(str(exc).splitlines()[0])
            i += clients

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    after = batch_histogram(server, model)
    hist = {b: n - before.get(b, 0) for b, n in sorted(after.items()) if n - before.get(b, 0)}
    execs = sum(hist.values())
    items = sum(b * n for b, n in hist.items())
    return {
        "requests": sum(counts),
        "errors": len(errors),
        "req_per_s": round(sum(counts) / elapsed, 1),
        "executions": execs,
        "mean_batch": round(items / execs, 2) if execs else 0.0,
        "batch_histogram": {str(b): n for b, n in hist.items()},
    }


def server_benchmark(clients: int, duration: float) -> dict:
    """Startup time of the course repository, then the embed load runs."""
    from batchlab.server import TritonServer

    t0 = time.monotonic()
    with TritonServer(startup_timeout=180) as server:
        startup = time.monotonic() - t0
        out = {"startup_s": round(startup, 2), "models": len(server.models), "clients": clients,
               "duration_s": duration}
        for model in ("embed", "embed_nobatch"):
            out[model] = load_embed(server, model, clients, duration)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_lm.py", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--blas-threads", type=int, default=1)
    p.add_argument("--no-server", action="store_true")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.duration <= 0 or args.clients < 1 or args.blas_threads < 1:
        print("error: --repeats, --duration, --clients and --blas-threads must be positive",
              file=sys.stderr)
        return 2
    blas.set_num_threads(args.blas_threads)
    result = {"blas_threads": blas.get_num_threads(), "decode": decode_benchmark(args.repeats),
              "kv_bytes_per_token": kv_report(ToyLM.default().config)}
    if not args.no_server:
        try:
            result["server"] = server_benchmark(args.clients, args.duration)
        except Exception as exc:
            print(f"error: server benchmark failed: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
    print(json.dumps(result, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
