"""The summary of a `SimResult`: one JSON-ready dict, the first ``warmup`` fraction of requests left out.

The window runs from the first measured arrival to the last measured finish (or drop); throughput
is the completions inside it over its length.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from batchlab._validate import fraction

PERCENTILES = (50, 90, 95, 99)
"""The latency percentiles every report (simulated or measured) gives."""


def percentile(x: Any, q: float, scale: float = 1.0, empty: float | None = None) -> float | None:
    """The ``q``-th percentile of the finite values of ``x`` times ``scale``, ``empty`` if none: the one place
    the course computes a latency percentile (every table, simulated or measured, calls it)."""
    v = np.asarray(x, dtype=float).ravel()
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q)) * scale if v.size else empty


def percentile_summary(x: np.ndarray, scale: float = 1e3) -> dict[str, float]:
    """mean, p50/p90/p95/p99 and max of the finite values of ``x`` times ``scale`` (s -> ms); NaN if none."""
    x = np.asarray(x, dtype=float).ravel()
    x = x[np.isfinite(x)]
    return {"mean": float(x.mean() * scale) if x.size else math.nan,
            **{f"p{q}": percentile(x, q, scale, math.nan) for q in PERCENTILES},
            "max": float(x.max() * scale) if x.size else math.nan}


def _stats_ms(x: np.ndarray) -> dict[str, float] | None:
    return percentile_summary(x) if x.size else None


def growing(wait: np.ndarray, scale: float) -> bool:
    """True when queue waits (in arrival order) trend upward: the 2nd, 3rd and 4th quarter means increase
    and the 4th exceeds the 2nd by more than half the 2nd plus two execution times (``scale``)."""
    if wait.size < 40:
        return False
    q = [float(c.mean()) for c in np.array_split(wait, 4)]
    return q[1] < q[2] < q[3] and (q[3] - q[1]) > 0.5 * q[1] + 2.0 * scale


def summarize_result(res: Any, warmup: float) -> dict[str, Any]:
    """Compute the summary of ``res`` (a `SimResult`) leaving out the first ``warmup`` fraction of requests."""
    w = fraction("warmup", warmup)
    r = res.records
    arr = r["arrival"]
    if r.size > 1 and np.any(arr[1:] < arr[:-1]):
        r = r[np.argsort(arr, kind="stable")]
    m = r[int(math.ceil(w * int(r.size))):]
    out: dict[str, Any] = {"scheduler": res.scheduler, "requests": int(m.size)}
    dropped = m["rejected"] | m["timed_out"]
    c = m[~dropped & ~np.isnan(m["finish"])]
    out["completed"] = int(c.size)
    out["rejected"] = int(m["rejected"].sum())
    out["timed_out"] = int(m["timed_out"].sum())
    t0, t1, in_win = _window(r, m, out)
    out["latency_ms"] = _stats_ms(c["finish"] - c["arrival"])
    out["queue_ms"] = _stats_ms(c["start"] - c["arrival"])
    ft = c["first_token"]
    has_ttft = ft.size > 0 and not np.all(np.isnan(ft))
    out["ttft_ms"] = _stats_ms(ft[~np.isnan(ft)] - c["arrival"][~np.isnan(ft)]) if has_ttft else None
    bw = _batches_in_window(res.batches, t0, t1)
    scale = _batch_stats(bw, res.instances, t0, t1, out)
    _llm_stats(res, r, bw, in_win, t1 - t0, out)
    cap = res.capacity_rps
    rho = (out["offered_rps"] / cap) if (cap and out["offered_rps"] is not None) else None
    out["capacity_rps"] = float(cap) if cap else None
    out["rho"] = float(rho) if rho is not None else None
    out["stable"] = _stable(m, c, rho, scale)
    for k, v in res.extra.get("summary_extra", {}).items():
        out[k] = v
    return out


def _window(r: np.ndarray, m: np.ndarray, out: dict[str, Any]) -> tuple[float, float, np.ndarray]:
    """The measurement window ``(t0, t1)`` of the measured requests ``m`` and which of all requests ``r``
    completed inside it; sets ``offered_rps`` and ``throughput_rps`` in ``out``."""
    t0 = float(m["arrival"][0]) if m.size else 0.0
    ends = m["finish"][~np.isnan(m["finish"])]
    t1 = float(ends.max()) if ends.size else t0
    span = t1 - t0
    a_span = float(m["arrival"][-1] - m["arrival"][0]) if m.size > 1 else 0.0
    out["offered_rps"] = float((m.size - 1) / a_span) if a_span > 0 else None
    # every completion inside the window counts, warm-up requests' included: under overload the
    # server spends the window draining their backlog too
    ok_all = ~(r["rejected"] | r["timed_out"]) & ~np.isnan(r["finish"])
    in_win = ok_all & (r["finish"] >= t0) & (r["finish"] <= t1)
    out["throughput_rps"] = float(in_win.sum() / span) if span > 0 else None
    return t0, t1, in_win


def _batches_in_window(b: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """The executions that started inside the window (all of them if none did)."""
    inw = (b["start"] >= t0) & (b["start"] <= t1)
    return b[inw] if inw.any() else b


def _batch_stats(bw: np.ndarray, instances: int, t0: float, t1: float, out: dict[str, Any]) -> float:
    """Set executions, batch sizes and utilisation in ``out``; return the mean execution time (0 if none)."""
    if not bw.size:
        out.update(executions=0, batch_size_mean=None, batch_size_hist={}, utilization=None)
        return 0.0
    span = t1 - t0
    sizes = bw["size"].astype(np.int64)
    out["executions"] = int(bw.size)
    out["batch_size_mean"] = float(sizes.mean())
    counts = np.bincount(sizes)
    out["batch_size_hist"] = {int(k): int(v) for k, v in enumerate(counts) if v}
    busy = np.clip(np.minimum(bw["end"], t1) - np.maximum(bw["start"], t0), 0.0, None).sum()
    out["utilization"] = float(busy / (instances * span)) if span > 0 else None
    return float((bw["end"] - bw["start"]).mean())


def _llm_stats(res: Any, r: np.ndarray, bw: np.ndarray, in_win: np.ndarray, span: float,
               out: dict[str, Any]) -> None:
    """Set η (useful share of tokens or slots), the KV high-water mark and tokens/s in ``out``."""
    eta_kind = res.extra.get("eta")
    if eta_kind == "tokens" and bw.size and bw["executed_tokens"].sum() > 0:
        out["eta"] = float(bw["useful_tokens"].sum() / bw["executed_tokens"].sum())
    elif eta_kind == "slots" and bw.size and bw["executed"].sum() > 0:
        out["eta"] = float(bw["size"].sum() / bw["executed"].sum())
    else:
        out["eta"] = None
    out["kv_high_water"] = int(bw["kv_tokens"].max()) if res.extra.get("kv") and bw.size else None
    tokens = res.extra.get("tokens") and span > 0
    out["tokens_per_s"] = float(r["output_tokens"][in_win].sum() / span) if tokens else None


def _stable(m: np.ndarray, c: np.ndarray, rho: float | None, scale: float) -> bool:
    """Whether the run carried its load: offered below capacity and queue waits not growing."""
    wait = c["start"] - c["arrival"]
    # sequences are a closed loop after their first step: the open-loop backlog shows in first steps
    trend = wait[c["step"] == 0] if np.any(c["seq_id"] >= 0) else wait
    stable = not (rho is not None and rho >= 1.0) and not growing(trend, scale)
    if np.any(m["seq_id"] >= 0):
        # a force-ended sequence leaves one refused request; such refusals bound the backlog by
        # dropping work, so the slots do not carry the load
        started = int(np.sum(m["step"] == 0))
        stable = stable and int(m["rejected"].sum()) <= 0.01 * max(started, 1)
    return bool(stable)
