"""The article's Python demo (`seed_demo`) redone in `batchlab.sim` (chapter 08): 「朴素」 is ``naive``,
「序列」 ``seq`` (early returns), and ``continuous`` refills a finished slot at the next step."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from batchlab.sim import workload as W
from batchlab.sim.continuous import simulate_continuous
from batchlab.sim.lengths import uniform
from batchlab.sim.service import TokenCost
from batchlab.sim.static_generation import simulate_static_generation

#: The article's model: every sequence advances 10 tokens per second whatever the batch size
#: (a prompt of 1 token; a request of L tokens takes L steps of 0.1 s).
ARTICLE_COST = TokenCost(prefill_per_token=0.0, decode_base=100_000.0, decode_per_seq=0.0)

#: A step takes 70 ms + 10 ms per running sequence: batching pays but is not free.
BATCH_COST = TokenCost(prefill_per_token=0.0, decode_base=70_000.0, decode_per_seq=10_000.0)

SCHEDULERS = ("naive", "seq", "continuous")


def workload_from_trace(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """The exact arrivals (s) and lengths (tokens) one `seed_demo.trace_sim` run generated."""
    arr = np.asarray([t for _, t, _ in trace.arrivals], dtype=float)
    lengths = np.asarray([n for _, _, n in trace.arrivals], dtype=np.int64)
    return arr, lengths


def article_workload(n: int, seed: int = 0, mean_gap_s: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """The article's traffic without the tick: `n` Poisson arrivals (mean gap 1.5 s, exact times)
    and lengths uniform on 5..50 tokens."""
    rng = np.random.default_rng(seed)
    arr = W.poisson(1.0 / mean_gap_s, n, seed=rng)
    return arr, uniform(5, 50).sample(n, rng)


def redo(arrivals: np.ndarray, lengths: np.ndarray, batch_size: int, delay_s: float,
         cost: TokenCost = ARTICLE_COST, schedulers: Sequence[str] = SCHEDULERS,
         warmup: float = 0.0) -> list[dict[str, Any]]:
    """One row per scheduler: n (completed), mean_s, p50_s, p99_s, throughput_rps, eta, stable."""
    arr = np.asarray(arrivals, dtype=float)
    out = np.asarray(lengths, dtype=np.int64)
    prompt = np.ones_like(out)
    rows = []
    for name in schedulers:
        if name in ("naive", "seq"):
            res = simulate_static_generation(arr, prompt, out, cost, batch_size, max_queue_delay_us=delay_s * 1e6,
                                             early_return=name == "seq", warmup=warmup)
        elif name == "continuous":
            res = simulate_continuous(arr, prompt, out, cost, max_active=batch_size, warmup=warmup)
        else:
            raise ValueError(f"unknown scheduler {name!r}; choose from {', '.join(SCHEDULERS)}")
        s = res.summary()
        lat = s["latency_ms"] or {}
        rows.append({"scheduler": name, "batch_size": batch_size, "delay_s": delay_s, "n": s["completed"],
                     "mean_s": lat.get("mean", math.nan) / 1e3, "p50_s": lat.get("p50", math.nan) / 1e3,
                     "p99_s": lat.get("p99", math.nan) / 1e3, "throughput_rps": s["throughput_rps"],
                     "eta": s["eta"], "stable": s["stable"]})
    return rows
