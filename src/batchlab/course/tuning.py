"""Tuning the dynamic batcher in the simulator (chapter 04): grids, heatmaps, capacity under an SLO.
All runs share one seeded unit-rate Poisson stream scaled to each rate (common random numbers)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from batchlab._validate import count, positive
from batchlab.sim.dynamic import simulate_dynamic, simulate_rule
from batchlab.batching import BatchRule
from batchlab.sim.summary import PERCENTILES
from batchlab.sim.workload import poisson
from batchlab.theory.formulas import heavy_load_wait
from batchlab.theory.queueing import batch_queue, little_wait

_TIE = 0.02  # `search`: rates within this share of the best count as a tie


def config_grid(max_batch_sizes: Iterable[int], max_queue_delays_us: Iterable[float] = (0.0,),
                preferred: Iterable[Sequence[int]] = ((),), instances: Iterable[int] = (1,)) -> list[BatchRule]:
    """Every combination (preferred sets larger than a max_batch_size are skipped for it)."""
    out = [BatchRule(int(m), tuple(p), float(d), int(k))
           for k, m, p, d in itertools.product(instances, max_batch_sizes, preferred, max_queue_delays_us)
           if not (p and max(p) > m)]
    if not out:
        raise ValueError("the grid is empty: check max_batch_sizes and preferred sizes")
    return out


def unit_arrivals(n_requests: int, seed: int = 0) -> np.ndarray:
    """A unit-rate Poisson stream of ``n_requests`` arrivals; divide by λ for rate λ."""
    n = count("n_requests", n_requests, lo=10)
    return np.cumsum(np.random.default_rng(seed).exponential(1.0, size=n))


def wait_formulas(service: Any, max_batch_size: int, rho: float, n_requests: int = 40_000, seed: int = 7,
                  warmup: int = 4000) -> dict[str, float]:
    """One load ρ (share of the full-batch capacity) simulated with delay 0: the mean wait W̄q (ms) by
    the article's formula with B = ``max_batch_size`` and with B = B̄, by Little's law from the run's
    L̄q, T̄batch, B̄ and U, as simulated, and by the exact batch-service chain at the rate the seeded
    schedule realised (not the nominal λ); with U, B̄, L̄q and T̄batch (ms) of the run."""
    cap = max_batch_size / service.time(max_batch_size)
    a = poisson(positive("rho", rho) * cap, count("n_requests", n_requests, lo=warmup + 10), seed=seed)
    res = simulate_dynamic(a, service, max_batch_size)
    s = res.summary()
    tb = float(np.mean(res.batches["end"] - res.batches["start"]))
    lq = float(res.queue_length_at(np.linspace(a[warmup], a[-1], 20_000)).mean())
    u, bbar = s["utilization"], s["batch_size_mean"]
    return {"rho": rho, "U": u, "B": bbar, "Lq": lq, "Tbatch_ms": 1e3 * tb,
            "article_ms": 1e3 * heavy_load_wait(lq, tb, max_batch_size),
            "article_bbar_ms": 1e3 * heavy_load_wait(lq, tb, bbar), "little_ms": 1e3 * little_wait(lq, tb, bbar, u),
            "sim_ms": s["queue_ms"]["mean"], "exact_ms": 1e3 * batch_queue(a.size / a[-1], service, max_batch_size).wait_s}


def evaluate(config: BatchRule, service: Any, rate: float, n_requests: int = 4000, seed: int = 0,
             warmup: float = 0.1, extra_latency_ms: float = 0.0, unit: np.ndarray | None = None) -> dict[str, Any]:
    """Simulate ``config`` at Poisson ``rate``: one flat row of config fields and figures, with
    ``extra_latency_ms`` (client overhead the simulator does not model) added to each latency."""
    r = positive("rate", rate)
    u = unit_arrivals(n_requests, seed) if unit is None else unit
    s = simulate_rule(u / r, service, config, warmup).summary()
    lat = s["latency_ms"] or {}
    return {"config": config, "label": config.label, **config.as_dict(), "rate_rps": r,
            "throughput_rps": s["throughput_rps"],
            **{f"p{q}_ms": lat.get(f"p{q}", math.nan) + extra_latency_ms for q in PERCENTILES},
            "mean_ms": lat.get("mean", math.nan) + extra_latency_ms,
            "queue_ms": (s["queue_ms"] or {}).get("mean", math.nan), "batch_size_mean": s["batch_size_mean"],
            "utilization": s["utilization"], "stable": s["stable"]}


def sweep(configs: Sequence[BatchRule], service: Any, rate: float, n_requests: int = 4000,
          seed: int = 0, warmup: float = 0.1, extra_latency_ms: float = 0.0) -> list[dict[str, Any]]:
    """`evaluate` every config at the same ``rate`` on the same arrival stream."""
    if not configs:
        raise ValueError("configs is empty")
    u = unit_arrivals(n_requests, seed)
    return [evaluate(c, service, rate, n_requests, seed, warmup, extra_latency_ms, unit=u) for c in configs]


def as_matrix(rows: Sequence[dict[str, Any]], value: str, x: str = "max_queue_delay_us",
              y: str = "max_batch_size") -> tuple[list[Any], list[Any], np.ndarray]:
    """Rows → (x values, y values, matrix[y, x] of ``value``) for a heatmap; NaN where missing."""
    if not rows:
        raise ValueError("rows is empty")
    for key in (value, x, y):
        if key not in rows[0]:
            raise ValueError(f"rows have no column {key!r}")
    xs = sorted({r[x] for r in rows})
    ys = sorted({r[y] for r in rows})
    z = np.full((len(ys), len(xs)), np.nan)
    for r in rows:
        v = r[value]
        z[ys.index(r[y]), xs.index(r[x])] = np.nan if v is None else float(v)
    return xs, ys, z


@dataclass
class SLOCapacity:
    """The highest Poisson rate at which ``config`` meets the SLO (0 if none scanned did);
    ``holds_below``: it also held at every lower scanned rate; ``row``: `evaluate` at ``rate_rps``."""

    config: BatchRule
    slo_ms: float
    percentile: int
    rate_rps: float
    holds_below: bool
    row: dict[str, Any] | None
    scanned: list[tuple[float, float, bool]] = field(default_factory=list)  # (rate, latency, ok)

    @property
    def label(self) -> str:
        """The config's label."""
        return self.config.label


def capacity_under_slo(config: BatchRule, service: Any, slo_ms: float, percentile: int = 95,
                       n_requests: int = 3000, seed: int = 0, points: int = 16, refine: int = 6,
                       extra_latency_ms: float = 0.0, unit: np.ndarray | None = None) -> SLOCapacity:
    """Scan ``points`` rates up to the full-batch capacity, then bisect ``refine`` times above the
    highest rate that met the SLO (p-``percentile`` latency ≤ ``slo_ms`` and a stable queue)."""
    slo = positive("slo_ms", slo_ms)
    if percentile not in PERCENTILES:
        raise ValueError(f"percentile must be one of {PERCENTILES}, got {percentile!r}")
    q = int(percentile)
    count("points", points, lo=2)
    u = unit_arrivals(n_requests, seed) if unit is None else unit
    cap = config.full_batch_capacity(service)
    scanned: list[tuple[float, float, bool]] = []
    rows: dict[float, dict[str, Any]] = {}

    def ok_at(rate: float) -> bool:
        row = evaluate(config, service, rate, n_requests, seed, extra_latency_ms=extra_latency_ms, unit=u)
        lat = row[f"p{q}_ms"]
        good = bool(row["stable"]) and lat <= slo
        scanned.append((rate, lat, good))
        rows[rate] = row
        return good

    grid = [cap * (i + 1) / points for i in range(points)]
    flags = [ok_at(r) for r in grid]
    passing = [i for i, f in enumerate(flags) if f]
    if not passing:
        return SLOCapacity(config, slo, q, 0.0, False, None, scanned)
    top = passing[-1]
    lo = grid[top]
    hi = grid[top + 1] if top + 1 < len(grid) else cap * (1 + 1.0 / points)
    for _ in range(refine):
        mid = 0.5 * (lo + hi)
        if ok_at(mid):
            lo = mid
        else:
            hi = mid
    holds = all(flags[: top + 1])
    scanned.sort()
    return SLOCapacity(config, slo, q, lo, holds, rows[lo], scanned)


def search(configs: Sequence[BatchRule], service: Any, slo_ms: float, percentile: int = 95,
           n_requests: int = 3000, seed: int = 0, points: int = 16, refine: int = 6,
           extra_latency_ms: float = 0.0) -> list[SLOCapacity]:
    """`capacity_under_slo` for every config, best first; those failing at a lower load rank last.
    Rates within 2 % of the best tie, then the simplest wins: shortest delay, no preferred sizes,
    fewer instances, smaller ``max_batch_size``."""
    if not configs:
        raise ValueError("configs is empty")
    u = unit_arrivals(n_requests, seed)
    out = [capacity_under_slo(c, service, slo_ms, percentile, n_requests, seed, points, refine,
                              extra_latency_ms, unit=u) for c in configs]
    eligible = [r for r in out if r.holds_below] or out
    top = max(r.rate_rps for r in eligible)

    def key(r: SLOCapacity) -> tuple:
        c = r.config
        if r.holds_below and top > 0 and r.rate_rps >= top * (1 - _TIE):
            return (0, c.max_queue_delay_us, len(c.preferred), c.instances, c.max_batch_size)
        return (1 if r.holds_below else 2, -r.rate_rps)

    return sorted(out, key=key)
