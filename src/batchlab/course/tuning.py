"""Tuning the dynamic batcher with the simulator: grids, heatmap data, capacity under a latency SLO.

The loop of chapter 04 (Model Analyzer does the same offline on the real server; Triton itself
never retunes a running model):

1. `calibrate_service` measures t(B) of a model on the real server (one request of B rows at a
   time, so every execution has exactly B rows) and returns a simulator service `Table`, plus
   the client overhead the simulator does not model;
2. `sweep` runs the simulator for each `BatcherConfig` at one arrival rate (heatmaps of
   throughput and p99 over ``max_batch_size`` × ``max_queue_delay``);
3. `capacity_under_slo` finds, for one config, the highest Poisson arrival rate whose latency
   percentile stays within the SLO; `search` ranks configs by it;
4. `BatcherConfig.to_pbtxt` writes the winner as a `config.pbtxt` for the real server, where the
   chapter confirms the prediction.

Every simulation uses common random numbers: one seeded unit-rate Poisson stream, scaled to each
rate, so comparisons between rates and configs are not blurred by different random draws.
Nothing here plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "BatcherConfig", "config_grid", "unit_arrivals", "evaluate", "sweep", "as_matrix",
    "SLOCapacity", "capacity_under_slo", "search", "Calibration", "calibrate_service",
    "embed_request", "service_from_stats", "load_factor", "with_instances",
]

PERCENTILES = (50, 95, 99)


# ----------------------------------------------------------------------------- configurations


@dataclass(frozen=True, order=True)
class BatcherConfig:
    """One dynamic-batcher setting: the fields of `config.pbtxt` that chapter 04 tunes.

    ``max_batch_size`` is the model-level field; ``max_queue_delay_us`` and ``preferred`` belong
    to ``dynamic_batching``; ``instances`` is ``instance_group.count``.
    """

    max_batch_size: int
    max_queue_delay_us: float = 0.0
    preferred: tuple[int, ...] = ()
    instances: int = 1

    def __post_init__(self) -> None:
        m = self.max_batch_size
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
            raise ValueError(f"max_batch_size must be an integer >= 1, got {m!r}")
        d = self.max_queue_delay_us
        if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)) or not (
                math.isfinite(d) and d >= 0):
            raise ValueError(f"max_queue_delay_us must be a number >= 0, got {d!r}")
        pref = tuple(sorted({int(p) for p in (self.preferred or ())}))
        if pref and (pref[0] < 1 or pref[-1] > m):
            raise ValueError(f"preferred batch sizes {pref} must lie in [1, max_batch_size={m}]")
        k = self.instances
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"instances must be an integer >= 1, got {k!r}")
        object.__setattr__(self, "max_batch_size", int(m))
        object.__setattr__(self, "max_queue_delay_us", float(d))
        object.__setattr__(self, "preferred", pref)
        object.__setattr__(self, "instances", int(k))

    @property
    def label(self) -> str:
        """Short text such as ``B=16 d=2000us pref=[8,16] x2``."""
        s = f"B={self.max_batch_size} d={self.max_queue_delay_us:g}us"
        if self.preferred:
            s += " pref=[" + ",".join(map(str, self.preferred)) + "]"
        if self.instances > 1:
            s += f" x{self.instances}"
        return s

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict."""
        return {"max_batch_size": self.max_batch_size, "max_queue_delay_us": self.max_queue_delay_us,
                "preferred": list(self.preferred), "instances": self.instances}

    def simulate(self, arrivals: np.ndarray, service: Any, warmup: float = 0.1) -> Any:
        """Run `batchlab.sim.simulate_dynamic` with this config; returns its `SimResult`."""
        from batchlab.sim.dynamic import simulate_dynamic

        return simulate_dynamic(arrivals, service, self.max_batch_size,
                                max_queue_delay_us=self.max_queue_delay_us,
                                preferred_batch_sizes=self.preferred, instances=self.instances,
                                warmup=warmup)

    def full_batch_capacity(self, service: Any) -> float:
        """Requests/s the instances serve when the queue is long (batches of the size then sent)."""
        b = self.preferred[-1] if (self.preferred and self.max_queue_delay_us == 0) else self.max_batch_size
        return self.instances * b / float(service.time(b))

    def to_pbtxt(self, base_text: str, name: str | None = None) -> str:
        """``base_text`` (a model's config.pbtxt) with this config's batcher fields written in.

        Parsed and printed with Triton's own schema (``model_config.proto``), so the result is
        exactly what the server reads; comments of the base text are not kept.
        """
        from google.protobuf import text_format

        from batchlab.config_pbtxt import parse_config

        msg = parse_config(base_text)
        if name is not None:
            msg.name = name
        msg.max_batch_size = self.max_batch_size
        db = msg.dynamic_batching
        db.SetInParent()
        db.max_queue_delay_microseconds = int(round(self.max_queue_delay_us))
        del db.preferred_batch_size[:]
        db.preferred_batch_size.extend(self.preferred)
        if len(msg.instance_group) == 0:
            msg.instance_group.add()
        msg.instance_group[0].count = self.instances
        return text_format.MessageToString(msg)


def config_grid(max_batch_sizes: Iterable[int], max_queue_delays_us: Iterable[float] = (0.0,),
                preferred: Iterable[Sequence[int]] = ((),), instances: Iterable[int] = (1,)) -> list[BatcherConfig]:
    """Every combination (preferred sets larger than a max_batch_size are skipped for it)."""
    out = []
    for k in instances:
        for m in max_batch_sizes:
            for p in preferred:
                if p and max(p) > m:
                    continue
                for d in max_queue_delays_us:
                    out.append(BatcherConfig(int(m), float(d), tuple(p), int(k)))
    if not out:
        raise ValueError("the grid is empty: check max_batch_sizes and preferred sizes")
    return out


# ----------------------------------------------------------------------------- simulation runs


def unit_arrivals(n_requests: int, seed: int = 0) -> np.ndarray:
    """A unit-rate Poisson stream of ``n_requests`` arrivals; divide by λ for rate λ."""
    if isinstance(n_requests, bool) or not isinstance(n_requests, (int, np.integer)) or n_requests < 10:
        raise ValueError(f"n_requests must be an integer >= 10, got {n_requests!r}")
    return np.cumsum(np.random.default_rng(seed).exponential(1.0, size=int(n_requests)))


def _rate(rate: Any) -> float:
    try:
        r = float(rate)
    except (TypeError, ValueError):
        raise ValueError(f"rate must be a number, got {rate!r}") from None
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"rate must be > 0, got {rate!r}")
    return r


def evaluate(config: BatcherConfig, service: Any, rate: float, n_requests: int = 4000, seed: int = 0,
             warmup: float = 0.1, extra_latency_ms: float = 0.0, unit: np.ndarray | None = None) -> dict[str, Any]:
    """Simulate ``config`` at Poisson ``rate``; one flat row (config fields + summary figures).

    ``extra_latency_ms`` (a constant client/transport overhead the simulator does not model) is
    added to every latency figure.
    """
    r = _rate(rate)
    u = unit_arrivals(n_requests, seed) if unit is None else unit
    s = config.simulate(u / r, service, warmup).summary()
    lat = s["latency_ms"] or {}
    row: dict[str, Any] = {"config": config, "label": config.label, **config.as_dict(), "rate_rps": r}
    row["throughput_rps"] = s["throughput_rps"]
    for q in PERCENTILES:
        row[f"p{q}_ms"] = lat.get(f"p{q}", math.nan) + extra_latency_ms
    row["mean_ms"] = lat.get("mean", math.nan) + extra_latency_ms
    row["queue_ms"] = (s["queue_ms"] or {}).get("mean", math.nan)
    row["batch_size_mean"] = s["batch_size_mean"]
    row["utilization"] = s["utilization"]
    row["stable"] = s["stable"]
    return row


def sweep(configs: Sequence[BatcherConfig], service: Any, rate: float, n_requests: int = 4000,
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


# ----------------------------------------------------------------------------- capacity under an SLO


@dataclass
class SLOCapacity:
    """The highest Poisson rate at which ``config`` meets the SLO, and how it was found.

    ``rate_rps`` is 0 when no scanned rate met it. ``holds_below`` tells whether the SLO also held
    at every lower scanned rate (with a long ``max_queue_delay`` a light load can miss an SLO that
    a heavier one meets: batches fill sooner). ``row`` is the `evaluate` row at ``rate_rps``.
    """

    config: BatcherConfig
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


def _check_slo(slo_ms: Any, percentile: Any) -> tuple[float, int]:
    try:
        slo = float(slo_ms)
    except (TypeError, ValueError):
        raise ValueError(f"slo_ms must be a number, got {slo_ms!r}") from None
    if not (math.isfinite(slo) and slo > 0):
        raise ValueError(f"slo_ms must be > 0, got {slo_ms!r}")
    if percentile not in PERCENTILES:
        raise ValueError(f"percentile must be one of {PERCENTILES}, got {percentile!r}")
    return slo, int(percentile)


def capacity_under_slo(config: BatcherConfig, service: Any, slo_ms: float, percentile: int = 95,
                       n_requests: int = 3000, seed: int = 0, points: int = 16, refine: int = 6,
                       extra_latency_ms: float = 0.0, unit: np.ndarray | None = None) -> SLOCapacity:
    """Scan ``points`` rates up to the full-batch capacity, then bisect ``refine`` times above the
    highest rate that met the SLO (p-``percentile`` latency ≤ ``slo_ms`` and a stable queue)."""
    slo, q = _check_slo(slo_ms, percentile)
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise ValueError(f"points must be an integer >= 2, got {points!r}")
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


def search(configs: Sequence[BatcherConfig], service: Any, slo_ms: float, percentile: int = 95,
           n_requests: int = 3000, seed: int = 0, points: int = 16, refine: int = 6,
           extra_latency_ms: float = 0.0, require_holds_below: bool = True,
           tie_tolerance: float = 0.02) -> list[SLOCapacity]:
    """`capacity_under_slo` for every config, best first.

    Configs whose SLO fails at some lower load rank after the others (``require_holds_below``).
    Configs within ``tie_tolerance`` (relative) of the highest rate are a tie, a difference the
    finite simulation cannot resolve; among them the simplest wins: the shortest
    ``max_queue_delay``, then no preferred sizes, then fewer instances, then the smaller
    ``max_batch_size`` (batcher.md: start from the defaults and add delay only when it pays).
    """
    if not configs:
        raise ValueError("configs is empty")
    if not 0 <= tie_tolerance < 1:
        raise ValueError(f"tie_tolerance must lie in [0, 1), got {tie_tolerance!r}")
    u = unit_arrivals(n_requests, seed)
    out = [capacity_under_slo(c, service, slo_ms, percentile, n_requests, seed, points, refine,
                              extra_latency_ms, unit=u) for c in configs]
    eligible = [r for r in out if r.holds_below] if require_holds_below else list(out)
    if not eligible:
        eligible = list(out)
    top = max(r.rate_rps for r in eligible)

    def key(r: SLOCapacity) -> tuple:
        ok = r.holds_below or not require_holds_below
        c = r.config
        if ok and top > 0 and r.rate_rps >= top * (1 - tie_tolerance):
            return (0, c.max_queue_delay_us, len(c.preferred), c.instances, c.max_batch_size)
        return (1 if ok else 2, -r.rate_rps)

    return sorted(out, key=key)


# ----------------------------------------------------------------------------- the real server


def embed_request(rows: int, length: int = 16, seed: int = 0) -> Any:
    """A `batchlab.load.RequestSpec` for the embed family: ``rows`` prompts of ``length`` token ids."""
    from batchlab.lm.vocab import VOCAB_SIZE
    from batchlab.load import RequestSpec

    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ValueError(f"rows must be an integer >= 1, got {rows!r}")
    tokens = np.random.default_rng(seed).integers(4, VOCAB_SIZE, size=(int(rows), int(length)))
    return RequestSpec({"TOKENS": tokens.astype(np.int32)}, outputs=["EMBEDDING", "BATCH_SIZE"])


@dataclass
class Calibration:
    """t(B) measured on the real server: the simulator service and what it leaves out.

    ``compute_ms``: batch size → mean compute_infer time of one execution (statistics
    extension); ``service_ms``: compute_input + infer + output; ``client_ms``: client p50 latency
    at that batch size; ``overhead_ms``: client p50 minus the server's service time at the
    smallest batch size (gRPC, the Python backend's request handling), a constant the simulator
    adds to each latency.
    """

    model: str
    batch_sizes: list[int]
    compute_ms: dict[int, float]
    service_ms: dict[int, float]
    client_ms: dict[int, float]
    overhead_ms: float

    def service(self, phase: str = "service", scale: float = 1.0) -> Any:
        """A `batchlab.sim.service.Table` of the measured times (``phase``: 'service' or
        'compute'), every time multiplied by ``scale`` (see `load_factor`)."""
        from batchlab.sim.service import Table

        if phase not in ("service", "compute"):
            raise ValueError(f"phase must be 'service' or 'compute', got {phase!r}")
        if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be a number > 0, got {scale!r}")
        src = self.service_ms if phase == "service" else self.compute_ms
        sizes = sorted(src)
        return Table(tuple(sizes), tuple(src[b] * scale for b in sizes), unit="ms")

    def speedup(self, phase: str = "compute") -> dict[int, float]:
        """S(B) = B · t(1) / t(B) from the measured times."""
        src = self.compute_ms if phase == "compute" else self.service_ms
        if 1 not in src:
            raise ValueError("the calibration has no batch size 1 to compare with")
        return {b: b * src[1] / t for b, t in sorted(src.items())}


def calibrate_service(server: Any, model: str = "embed", batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
                      rows_per_size: int = 96, min_requests: int = 6, warmup_requests: int = 2,
                      rounds: int = 3, request_for: Callable[[int], Any] | None = None) -> Calibration:
    """Measure one execution's time at each batch size on the real server.

    Requests of B rows are sent one at a time (concurrency 1), so each execution holds exactly
    one request and B rows; about ``rows_per_size`` rows (at least ``min_requests`` requests)
    per size, split over ``rounds`` interleaved rounds (every size once per round). Each size
    keeps its fastest round ("best of N", as benchmarks do): a burst of CPU contention from
    another process then spoils one round, not the table. ``request_for(B)`` builds the request
    (default: `embed_request`).
    """
    from batchlab.load import run_closed_loop

    sizes = sorted({int(b) for b in batch_sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch_sizes must be positive integers, got {list(batch_sizes)!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    build = request_for or (lambda b: embed_request(b, seed=b))
    compute: dict[int, float] = {}
    service: dict[int, float] = {}
    client: dict[int, list[float]] = {b: [] for b in sizes}
    for r in range(rounds):
        for b in sizes:
            n = max(-(-min_requests // rounds), -(-rows_per_size // (b * rounds)))
            rep = run_closed_loop(server, model, build(b), concurrency=1, n_requests=n,
                                  warmup_requests=warmup_requests if r == 0 else 0, progress=False)
            if rep.n_errors:
                kinds = rep.records.errors()
                raise RuntimeError(f"calibration requests to {model!r} failed: {next(iter(kinds), '?')}")
            st = rep.server
            if st is None or b not in st.batch_compute_ms():
                raise RuntimeError(f"the server's statistics show no execution of batch size {b} for {model!r}")
            c, sv = st.batch_compute_ms()[b], st.batch_service_ms()[b]
            if b not in service or sv < service[b]:
                compute[b], service[b] = c, sv
            client[b].append(rep.latency_ms()["p50"])
    best_client = {b: float(min(v)) for b, v in client.items()}
    b0 = sizes[0]
    return Calibration(model, sizes, compute, service, best_client, max(0.0, best_client[b0] - service[b0]))


def load_factor(cal: Calibration, stats: Any, phase: str = "service", min_batches: int = 5) -> float:
    """How much slower executions ran under load than in the calibration: a single factor.

    ``stats`` is the `ModelStats` of a loaded run (``LoadReport.server``). For every batch size
    executed at least ``min_batches`` times, the run's mean time is divided by the calibrated
    time at that size (interpolated between calibrated sizes); the factors are averaged weighted
    by the number of executions. On a machine where the load generator shares the CPU with the
    server, this is typically 1.1–1.5.
    """
    if phase not in ("service", "compute"):
        raise ValueError(f"phase must be 'service' or 'compute', got {phase!r}")
    table = cal.service(phase)
    times = stats.batch_service_ms() if phase == "service" else stats.batch_compute_ms()
    hist = stats.batch_histogram()
    pairs = [(hist[b], times[b] / (table.time(b) * 1e3)) for b in times if hist.get(b, 0) >= min_batches]
    if not pairs:
        raise ValueError("the run executed no batch size often enough to compare with the calibration")
    w = np.asarray([p[0] for p in pairs], dtype=float)
    r = np.asarray([p[1] for p in pairs], dtype=float)
    return float((w * r).sum() / w.sum())


def service_from_stats(stats: Any, phase: str = "service", min_batches: int = 3) -> Any:
    """A simulator `Table` from the batch times a real run had (a `batchlab.load.ModelStats`).

    Sizes executed fewer than ``min_batches`` times are left out (too noisy). ``phase``:
    'service' (compute input + infer + output) or 'compute' (infer only).
    """
    from batchlab.sim.service import Table

    if phase not in ("service", "compute"):
        raise ValueError(f"phase must be 'service' or 'compute', got {phase!r}")
    times = stats.batch_service_ms() if phase == "service" else stats.batch_compute_ms()
    hist = stats.batch_histogram()
    sizes = sorted(b for b in times if hist.get(b, 0) >= min_batches)
    if not sizes:
        raise ValueError("the statistics hold no batch size executed often enough to build a table")
    return Table(tuple(sizes), tuple(times[b] for b in sizes), unit="ms")


def with_instances(configs: Sequence[BatcherConfig], instances: int) -> list[BatcherConfig]:
    """The same configs with another instance count."""
    return [replace(c, instances=instances) for c in configs]
