"""Chapter 06 (工程实战) experiments: live metrics, starvation and its fixes, what
`max_queue_delay` bounds, online versus offline settings."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from batchlab.course.presets import EMBED_LIKE
from batchlab.load import MetricsTimeline, RequestSpec, run_open_loop
from batchlab.models.requests import random_embed_inputs
from batchlab.sim import workload as W
from batchlab.sim.dynamic import simulate_dynamic
from batchlab.sim.results import SimResult
from batchlab.sim import QueuePolicy
from batchlab.sim.service import Affine
from batchlab.sim.summary import percentile


@dataclass
class StarvationRun:
    """One policy's simulation: the result, each request's priority, and the summary rows."""

    policy: str
    result: SimResult
    priority: np.ndarray
    rows: list[dict[str, Any]]


def _class_rows(policy: str, res: SimResult, prio: np.ndarray, warmup: float = 0.1) -> list[dict[str, Any]]:
    r = res.records
    i0 = int(math.ceil(warmup * r.size))
    out = []
    for lev, name in ((1, "高优先级(在线)"), (2, "低优先级(离线)")):
        m = (np.arange(r.size) >= i0) & (prio == lev)
        dropped = r["rejected"][m] | r["timed_out"][m]
        ok = m & ~(r["rejected"] | r["timed_out"]) & ~np.isnan(r["finish"])
        wait = r["start"][ok] - r["arrival"][ok]
        out.append({"policy": policy, "class": name, "n": int(m.sum()),
                    "served": int(ok.sum()), "dropped_pct": 100.0 * float(dropped.mean()) if m.any() else 0.0,
                    "queue_p50_ms": percentile(wait, 50, 1e3), "queue_p99_ms": percentile(wait, 99, 1e3),
                    "queue_max_ms": float(wait.max()) * 1e3 if wait.size else None})
    return out


def starvation_experiment(high_load: float = 0.85, low_load: float = 0.25, n: int = 12_000,
                          service: Affine = EMBED_LIKE, max_batch_size: int = 32,
                          low_timeout_ms: float = 200.0, low_max_queue: int = 64,
                          delay_ms: float = 5.0, seed: int = 21) -> list[StarvationRun]:
    """Online (priority 1) and offline (priority 2) traffic together over one instance's capacity,
    per policy: fifo, fifo_delay, priority, and priority with a timeout (REJECT or DELAY), a queue
    cap or a second instance (the fix: capacity)."""
    cap = service.throughput(max_batch_size)
    rng = np.random.default_rng(seed)
    hi = W.poisson(high_load * cap, int(n * high_load / (high_load + low_load)), seed=rng)
    lo = W.poisson(low_load * cap, n - hi.size, seed=rng)
    arr = np.concatenate([hi, lo])
    prio = np.concatenate([np.ones(hi.size, dtype=np.int64), np.full(lo.size, 2, dtype=np.int64)])
    order = np.argsort(arr, kind="stable")
    arr, prio = arr[order], prio[order]
    t_us = low_timeout_ms * 1e3
    plans: list[tuple[str, dict[str, Any]]] = [
        ("fifo", {}),
        ("fifo_delay", {"max_queue_delay_us": delay_ms * 1e3}),
        ("priority", {"priority_levels": 2, "priorities": prio}),
        ("priority_timeout", {"priority_levels": 2, "priorities": prio,
                              "priority_queue_policy": {2: QueuePolicy(0, t_us, "REJECT")}}),
        ("priority_delay_action", {"priority_levels": 2, "priorities": prio,
                                   "priority_queue_policy": {2: QueuePolicy(0, t_us, "DELAY")}}),
        ("priority_max_queue", {"priority_levels": 2, "priorities": prio,
                                "priority_queue_policy": {2: QueuePolicy(low_max_queue, 0.0, "REJECT")}}),
        ("priority_2_instances", {"priority_levels": 2, "priorities": prio, "instances": 2}),
    ]
    results = {name: simulate_dynamic(arr, service, max_batch_size=max_batch_size, **kw) for name, kw in plans}
    return [StarvationRun(name, res, prio, _class_rows(name, res, prio)) for name, res in results.items()]


def low_excess_pct(run: StarvationRun, capacity_rps: float, warmup: float = 0.1) -> float:
    """The share (%) of the low-priority arrivals beyond what the instance can serve once the high
    class is served: (λ_high + λ_low − capacity) / λ_low, with the rates realised by the run's own
    arrivals over the window its rows count (after the first `warmup` of requests)."""
    arr = run.result.records["arrival"]
    i0 = int(math.ceil(warmup * arr.size))
    a, p = arr[i0:], run.priority[i0:]
    span = float(a.max() - a.min())
    hi, lo = np.sum(p == 1) / span, np.sum(p == 2) / span
    return 100.0 * float(hi + lo - capacity_rps) / float(lo)


def delay_bound_experiment(loads: Sequence[float], delay_ms: float = 5.0, service: Affine = EMBED_LIKE,
                           max_batch_size: int = 32, n: int = 12_000, seed: int = 31) -> list[dict[str, Any]]:
    """Queue time against load (fractions of the full-batch capacity) with ``max_queue_delay`` =
    `delay_ms`; over_delay_pct is the share of requests that waited longer."""
    cap = service.throughput(max_batch_size)
    rows = []
    for i, load in enumerate(loads):
        arr = W.poisson(load * cap, n, seed=seed + i)
        res = simulate_dynamic(arr, service, max_batch_size=max_batch_size, max_queue_delay_us=delay_ms * 1e3)
        s = res.summary()
        r = res.records[int(0.1 * n):]
        q = (r["start"] - r["arrival"]) * 1e3
        rows.append({"load": float(load), "delay_ms": delay_ms, "queue_p50_ms": percentile(q, 50),
                     "queue_p99_ms": percentile(q, 99), "queue_max_ms": float(q.max()),
                     "over_delay_pct": 100.0 * float(np.mean(q > delay_ms * (1 + 1e-9))),
                     "stable": s["stable"]})
    return rows


def online_offline_grid(online_rate: float, settings: Sequence[tuple[int, float]],
                        service: Affine = EMBED_LIKE, n: int = 12_000, seed: int = 41) -> list[dict[str, Any]]:
    """Per (max_batch_size, delay_ms): latency at `online_rate`, and the capacity reached when
    offered 3× the largest full-batch capacity. Rows: max_batch_size, delay_ms, p50_ms, p99_ms,
    stable, capacity_rps, mean_batch_offline."""
    arr = W.poisson(online_rate, n, seed=seed)
    top = max(service.throughput(int(b)) for b, _ in settings)
    over = W.poisson(3.0 * top, n, seed=seed + 1)
    rows = []
    for b, d in settings:
        s = simulate_dynamic(arr, service, max_batch_size=int(b), max_queue_delay_us=d * 1e3).summary()
        o = simulate_dynamic(over, service, max_batch_size=int(b), max_queue_delay_us=d * 1e3).summary()
        rows.append({"max_batch_size": int(b), "delay_ms": float(d),
                     "p50_ms": s["latency_ms"]["p50"], "p99_ms": s["latency_ms"]["p99"], "stable": s["stable"],
                     "capacity_rps": o["throughput_rps"], "mean_batch_offline": o["batch_size_mean"]})
    return rows


def live_metrics_run(server: Any, model: str, rates: Sequence[float], seconds_per_phase: float = 1.5,
                     interval: float = 0.2, seed: int = 0, tail_s: float = 1.0) -> tuple[list[dict[str, float]], Any]:
    """Drive an `embed`-like `model` through Poisson phases at `rates` while scraping the metrics
    endpoint every `interval` s (and `tail_s` after). Returns (timeline rows, `LoadReport`)."""
    if not rates or any(r <= 0 for r in rates):
        raise ValueError("rates must be a non-empty list of positive requests/s")
    arrivals = W.rate_curve(list(rates), seconds_per_phase * len(rates), seed=seed)
    spec = RequestSpec(random_embed_inputs(seed=seed, high=200))
    with MetricsTimeline(server.metrics_url, interval=interval) as tl:
        time.sleep(2 * interval)
        rep = run_open_loop(server, model, spec, arrivals=arrivals, progress=False, request_timeout_s=30.0)
        time.sleep(tail_s)
    return tl.rows(model), rep
