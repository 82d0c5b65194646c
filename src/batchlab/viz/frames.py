"""Animation frames from simulator records: pure functions, no drawing, no widgets.

A *lane* is one scheduler's run prepared for the animation (the columns of a
`batchlab.sim.SimResult` it needs); a *frame* is what that lane looks like at one instant:

* the request queue (who waits, and for how long),
* the pot (锅, the batch on the GPU): which requests occupy its slots and how far along each is;
  a request that has finished but still sits in a request-level batch is padding (陪跑),
* the time window: how much of ``max_queue_delay`` the oldest waiting request has used,
* how many requests are done, and the utilisation so far.

Two utilisations, because the article's "GPU 利用率" can mean either:

* **busy** (忙碌率): the fraction of time an execution is running, what ``nvidia-smi`` calls
  GPU-Util ("percent of time over the past sample period during which one or more kernels was
  executing");
* **fill** (满锅率): the fraction of the pot's slot-time holding work someone needs,
  Σ duration · useful slots / (slots · time). A request-level batch counts its padding as
  empty; one request alone in a pot of 8 fills 1/8 of it however busy the GPU is.

Everything here is a function of arrays, so it is unit-tested without a display.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from batchlab._validate import count, non_negative, positive, real

LANE_KINDS = ("nobatch", "dynamic", "static", "continuous")
"""Lane kinds: no batching, stateless dynamic batching, request-level generation batches,
iteration-level (continuous) batching."""

_SCHEDULER_KIND = {
    "nobatch": "nobatch",
    "dynamic": "dynamic",
    "static_generation": "static",
    "continuous": "continuous",
}


@dataclass(frozen=True)
class Lane:
    """One scheduler's run, as the animation needs it (times in seconds)."""

    name: str
    kind: str
    slots: int
    """Capacity of the pot: max_batch_size (dynamic batching) or max_active (continuous)."""
    delay_s: float
    """max_queue_delay in seconds (the time window); 0 when the scheduler does not wait."""
    arrival: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    batch_id: np.ndarray
    output_tokens: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    b_size: np.ndarray
    b_useful: np.ndarray
    """Per execution: the fraction of its slot-time doing needed work (1 without padding)."""

    def __post_init__(self) -> None:
        if self.kind not in LANE_KINDS:
            raise ValueError(f"lane kind must be one of {', '.join(LANE_KINDS)}, not {self.kind!r}")
        count("slots", self.slots)
        if not self.delay_s >= 0:
            raise ValueError(f"delay_s must be >= 0, not {self.delay_s!r}")
        n = self.arrival.size
        for name in ("start", "finish", "batch_id", "output_tokens"):
            if getattr(self, name).size != n:
                raise ValueError(f"lane column {name} has {getattr(self, name).size} rows, arrival has {n}")
        m = self.b_start.size
        for name in ("b_end", "b_size", "b_useful"):
            if getattr(self, name).size != m:
                raise ValueError(f"lane column {name} has {getattr(self, name).size} rows, b_start has {m}")

    @property
    def n(self) -> int:
        """Number of requests."""
        return int(self.arrival.size)

    @property
    def end(self) -> float:
        """When the last request finished (or the last arrival, if none finished)."""
        done = self.finish[np.isfinite(self.finish)]
        if done.size:
            return float(done.max())
        return float(self.arrival.max()) if self.n else 0.0


def lane_from_result(result: Any, name: str, slots: int | None = None, delay_s: float | None = None) -> Lane:
    """A `Lane` from a `batchlab.sim.SimResult`.

    ``slots`` defaults to the run's ``max_batch_size`` (or ``max_active``); ``delay_s`` to its
    ``max_queue_delay_us`` (0 when it has none).
    """
    kind = _SCHEDULER_KIND.get(getattr(result, "scheduler", None))
    if kind is None:
        raise ValueError(f"cannot animate a {getattr(result, 'scheduler', type(result).__name__)!r} result; "
                         f"expected one of {', '.join(_SCHEDULER_KIND)}")
    cfg = dict(getattr(result, "config", {}) or {})
    if slots is None:
        slots = int(cfg.get("max_batch_size") or cfg.get("max_active") or 1)
    if kind == "nobatch":
        slots = int(slots)
    if delay_s is None:
        delay_s = float(cfg.get("max_queue_delay_us", 0.0) or 0.0) * 1e-6
    r, b = result.records, result.batches
    if r.size and np.any(np.diff(r["id"]) < 0):
        r = r[np.argsort(r["id"])]
    size = b["size"].astype(np.int64)
    useful = np.ones(b.size, dtype=float)
    if b.size and kind == "static":
        ex = b["executed_tokens"].astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            useful = np.where(ex > 0, b["useful_tokens"] / ex, 1.0)
    return Lane(
        name=name, kind=kind, slots=int(slots), delay_s=float(delay_s),
        arrival=np.asarray(r["arrival"], float), start=np.asarray(r["start"], float),
        finish=np.asarray(r["finish"], float), batch_id=np.asarray(r["batch_id"], np.int64),
        output_tokens=np.asarray(r["output_tokens"], np.int64),
        b_start=np.asarray(b["start"], float), b_end=np.asarray(b["end"], float),
        b_size=size, b_useful=np.asarray(useful, float),
    )


@dataclass(frozen=True)
class Frame:
    """One lane at time ``t``."""

    t: float
    queue_ids: np.ndarray
    """Requests waiting, oldest first."""
    queue_age: np.ndarray
    """Seconds each has waited so far."""
    gpu_ids: np.ndarray
    """Requests in the pot (the execution running at ``t``)."""
    gpu_progress: np.ndarray
    """Fraction of its own work each has done, 0…1."""
    gpu_padding: np.ndarray
    """True where a request is already done but still occupies its slot (request-level batch)."""
    window: float | None
    """Oldest waiting request's age / max_queue_delay, clipped to 1 (None: no window or empty queue)."""
    done: int
    busy: float
    """Busy fraction over [0, t]."""
    fill: float
    """Useful slot fill over [0, t]."""
    mean_latency: float
    """Mean latency (s) of the requests finished by ``t`` (NaN if none)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def queue_len(self) -> int:
        """Requests waiting."""
        return int(self.queue_ids.size)

    @property
    def batch_size(self) -> int:
        """Requests in the pot."""
        return int(self.gpu_ids.size)


def _overlap(s: np.ndarray, e: np.ndarray, t0: float, t1: float) -> np.ndarray:
    return np.clip(np.minimum(e, t1) - np.maximum(s, t0), 0.0, None)


def utilization(lane: Lane, t0: float, t1: float) -> tuple[float, float]:
    """(busy, fill) of ``lane`` over the interval [t0, t1]; (0, 0) for an empty interval.

    busy = time with an execution running / (t1 − t0);
    fill = Σ overlap · size · useful fraction / (slots · (t1 − t0)).
    """
    t0, t1 = real("t0", t0), real("t1", t1)
    span = t1 - t0
    if span <= 0:
        return 0.0, 0.0
    ov = _overlap(lane.b_start, lane.b_end, t0, t1)
    # executions never overlap on one instance; with several they may, so busy is capped at 1
    busy = min(1.0, float(ov.sum()) / span)
    fill = float((ov * lane.b_size * lane.b_useful).sum()) / (lane.slots * span)
    return busy, min(1.0, fill)


def utilization_series(lane: Lane, edges: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Busy and fill in each window [edges[i], edges[i+1]); two arrays of len(edges) − 1."""
    e = np.asarray(edges, dtype=float)
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise ValueError("edges must be an increasing 1-D array of at least two times")
    busy = np.empty(e.size - 1)
    fill = np.empty(e.size - 1)
    for i in range(e.size - 1):
        busy[i], fill[i] = utilization(lane, float(e[i]), float(e[i + 1]))
    return busy, fill


def _running_batches(lane: Lane, t: float) -> np.ndarray:
    return np.flatnonzero((lane.b_start <= t) & (t < lane.b_end))


def frame_at(lane: Lane, t: float) -> Frame:
    """What ``lane`` looks like at time ``t`` (seconds)."""
    t = non_negative("frame time", t)
    arr, st, fin = lane.arrival, lane.start, lane.finish
    started = np.isfinite(st) & (st <= t)
    dropped = ~np.isfinite(st) & np.isfinite(fin) & (fin <= t)
    waiting = (arr <= t) & ~started & ~dropped
    q = np.flatnonzero(waiting)
    q = q[np.argsort(arr[q], kind="stable")]
    age = t - arr[q]

    if lane.kind == "continuous":
        ids = np.flatnonzero(started & np.isfinite(fin) & (t < fin))
        ids = ids[np.argsort(st[ids], kind="stable")]
        span = fin[ids] - st[ids]
        with np.errstate(invalid="ignore", divide="ignore"):
            prog = np.where(span > 0, (t - st[ids]) / span, 1.0)
        pad = np.zeros(ids.size, dtype=bool)
    else:
        rb = _running_batches(lane, t)
        ids = np.flatnonzero(np.isin(lane.batch_id, rb)) if rb.size else np.zeros(0, np.int64)
        prog = np.zeros(ids.size)
        pad = np.zeros(ids.size, dtype=bool)
        for bid in rb:
            members = lane.batch_id[ids] == bid
            bs, be = lane.b_start[bid], lane.b_end[bid]
            frac = (t - bs) / (be - bs) if be > bs else 1.0
            if lane.kind == "static":
                own = lane.output_tokens[ids[members]].astype(float)
                longest = float(own.max()) if own.size else 1.0
                p = np.minimum(1.0, frac * longest / np.maximum(own, 1.0))
                prog[members] = p
                pad[members] = frac * longest >= own
            else:
                prog[members] = frac
    prog = np.clip(prog, 0.0, 1.0)

    window = None
    if lane.delay_s > 0 and q.size:
        window = float(min(1.0, age[0] / lane.delay_s))
    finished = np.isfinite(fin) & (fin <= t) & np.isfinite(st)
    lat = fin[finished] - arr[finished]
    busy, fill = utilization(lane, 0.0, t) if t > 0 else (0.0, 0.0)
    return Frame(
        t=float(t), queue_ids=q, queue_age=age, gpu_ids=ids, gpu_progress=prog, gpu_padding=pad,
        window=window, done=int(finished.sum()), busy=busy, fill=fill,
        mean_latency=float(lat.mean()) if lat.size else float("nan"),
    )


def default_horizon(lanes: Sequence[Lane], cap_factor: float = 1.5) -> float:
    """A time span that shows every lane's story: until the batched lanes have drained.

    The longest finish among the lanes, but at most ``cap_factor`` × the last arrival (an
    overloaded lane, whose queue grows without bound, would otherwise stretch the animation).
    """
    if not lanes:
        raise ValueError("need at least one lane")
    last_arrival = max(float(l.arrival.max()) if l.n else 0.0 for l in lanes)
    end = max(l.end for l in lanes)
    cap = cap_factor * last_arrival if last_arrival > 0 else end
    return float(max(min(end, cap), 1e-6))


def frame_times(horizon: float, n_frames: int) -> np.ndarray:
    """``n_frames`` evenly spaced instants from 0 to ``horizon`` (both included)."""
    count("n_frames", n_frames, lo=2)
    positive("horizon", horizon)
    return np.linspace(0.0, float(horizon), int(n_frames))


def step_index(index: int, n_frames: int, step: int = 1) -> int:
    """The frame index after stepping ``step`` frames from ``index``, wrapping around."""
    if n_frames < 1:
        raise ValueError("n_frames must be >= 1")
    return int((index + step) % n_frames)


def frame_label(index: int, n_frames: int, t: float) -> str:
    """The text under the animation: frame number and simulated time."""
    return f"第 {index + 1} / {n_frames} 帧 · t = {t:.2f} s"


def lane_summary(lane: Lane, t0: float | None = None, t1: float | None = None) -> dict[str, float]:
    """Figures of one lane: mean / P95 latency (s), mean batch size, η (useful share of the pot's
    occupied slot-time), and busy / fill over [t0, t1] (default: first to last arrival)."""
    done = np.isfinite(lane.finish) & np.isfinite(lane.start)
    lat = lane.finish[done] - lane.arrival[done]
    a0 = float(lane.arrival.min()) if lane.n else 0.0
    a1 = float(lane.arrival.max()) if lane.n else 0.0
    busy, fill = utilization(lane, a0 if t0 is None else t0, a1 if t1 is None else t1)
    dur = lane.b_end - lane.b_start
    occupied = float((dur * lane.b_size).sum())
    eta = float((dur * lane.b_size * lane.b_useful).sum()) / occupied if occupied > 0 else float("nan")
    return {
        "latency_mean_s": float(lat.mean()) if lat.size else float("nan"),
        "latency_p95_s": float(np.percentile(lat, 95)) if lat.size else float("nan"),
        "batch_mean": float(lane.b_size.mean()) if lane.b_size.size else float("nan"),
        "eta": eta,
        "busy": busy,
        "fill": fill,
        "done": int(done.sum()),
    }
