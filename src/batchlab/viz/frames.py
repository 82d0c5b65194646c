"""Animation frames from simulator records, pure functions of arrays: a `Lane` is one scheduler's
run, a `Frame` that lane at one instant (queue, pot, time window, done, utilisation so far).
Utilisation is **busy** (忙碌率, the share of time an execution runs, nvidia-smi's GPU-Util) or
**fill** (满锅率, Σ duration · useful slots / (slots · time); padding counts as empty)."""

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from batchlab._validate import count, non_negative, real
from batchlab.sim.summary import percentile

#: Lane kind of each simulator scheduler: no batching, stateless dynamic batching,
#: request-level generation batches, iteration-level (continuous) batching.
_KIND = {"nobatch": "nobatch", "dynamic": "dynamic", "static_generation": "static", "continuous": "continuous"}


@dataclass(frozen=True)
class Lane:
    """One scheduler's run, as the animation needs it (times in seconds). `slots` is the pot's
    capacity, `delay_s` the time window (0: none), `b_useful` each execution's useful share."""

    name: str
    kind: str
    slots: int
    delay_s: float
    arrival: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    batch_id: np.ndarray
    output_tokens: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    b_size: np.ndarray
    b_useful: np.ndarray

    def __post_init__(self) -> None:
        if self.kind not in _KIND.values():
            raise ValueError(f"lane kind must be one of {', '.join(_KIND.values())}, not {self.kind!r}")
        count("slots", self.slots)
        if not self.delay_s >= 0:
            raise ValueError(f"delay_s must be >= 0, not {self.delay_s!r}")
        for first, name in [("arrival", n) for n in ("start", "finish", "batch_id", "output_tokens")] + \
                           [("b_start", n) for n in ("b_end", "b_size", "b_useful")]:
            if (got := getattr(self, name).size) != (want := getattr(self, first).size):
                raise ValueError(f"lane column {name} has {got} rows, {first} has {want}")

    @property
    def end(self) -> float:
        """When the last request finished (or the last arrival, if none finished)."""
        done = self.finish[np.isfinite(self.finish)]
        return float(done.max()) if done.size else float(self.arrival.max()) if self.arrival.size else 0.0


def lane_from_result(result: Any, name: str, slots: int, delay_s: float) -> Lane:
    """A `Lane` named `name` from a `batchlab.sim.SimResult`, drawn as a pot of `slots` with a time
    window of `delay_s` seconds (0: none)."""
    kind = _KIND.get(getattr(result, "scheduler", None))
    if kind is None:
        raise ValueError(f"cannot animate a {getattr(result, 'scheduler', type(result).__name__)!r} result; "
                         f"expected one of {', '.join(_KIND)}")
    r, b = result.records[np.argsort(result.records["id"])], result.batches
    useful = np.ones(b.size)
    if b.size and kind == "static":
        ex = b["executed_tokens"].astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            useful = np.where(ex > 0, b["useful_tokens"] / ex, 1.0)
    col = {k: np.asarray(r[k], float) for k in ("arrival", "start", "finish")}
    return Lane(name=name, kind=kind, slots=int(slots), delay_s=float(delay_s), **col,
                batch_id=np.asarray(r["batch_id"], np.int64), output_tokens=np.asarray(r["output_tokens"], np.int64),
                b_start=np.asarray(b["start"], float), b_end=np.asarray(b["end"], float),
                b_size=b["size"].astype(np.int64), b_useful=np.asarray(useful, float))


@dataclass(frozen=True)
class Frame:
    """One lane at time `t`: waiting requests oldest first with their ages (s); the requests in the
    pot with their progress (0…1) and whether each is padding; the oldest waiter's age / delay
    (None: no window or nobody waits); requests done; busy and fill over [0, t]."""

    t: float
    queue_ids: np.ndarray
    queue_age: np.ndarray
    gpu_ids: np.ndarray
    gpu_progress: np.ndarray
    gpu_padding: np.ndarray
    window: float | None
    done: int
    busy: float
    fill: float

    @property
    def queue_len(self) -> int:
        return int(self.queue_ids.size)

    @property
    def batch_size(self) -> int:
        return int(self.gpu_ids.size)


def utilization(lane: Lane, t0: float, t1: float) -> tuple[float, float]:
    """(busy, fill) of `lane` over [t0, t1]; (0, 0) for an empty interval. Busy is capped at 1
    (executions of several instances may overlap)."""
    t0, t1 = real("t0", t0), real("t1", t1)
    if t1 <= t0:
        return 0.0, 0.0
    ov = np.clip(np.minimum(lane.b_end, t1) - np.maximum(lane.b_start, t0), 0.0, None)
    fill = float((ov * lane.b_size * lane.b_useful).sum()) / (lane.slots * (t1 - t0))
    return min(1.0, float(ov.sum()) / (t1 - t0)), min(1.0, fill)


def utilization_series(lane: Lane, edges: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Busy and fill in each window [edges[i], edges[i+1]); two arrays of len(edges) − 1."""
    e = np.asarray(edges, dtype=float)
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise ValueError("edges must be an increasing 1-D array of at least two times")
    return tuple(np.array([utilization(lane, float(a), float(b)) for a, b in zip(e[:-1], e[1:])]).T)


def frame_at(lane: Lane, t: float) -> Frame:
    """What `lane` looks like at time `t` (seconds)."""
    t = non_negative("frame time", t)
    arr, st, fin = lane.arrival, lane.start, lane.finish
    started, dropped = np.isfinite(st) & (st <= t), ~np.isfinite(st) & np.isfinite(fin) & (fin <= t)
    q = np.flatnonzero((arr <= t) & ~started & ~dropped)
    q = q[np.argsort(arr[q], kind="stable")]
    age = t - arr[q]
    if lane.kind == "continuous":
        ids = np.flatnonzero(started & np.isfinite(fin) & (t < fin))
        ids = ids[np.argsort(st[ids], kind="stable")]
        with np.errstate(invalid="ignore", divide="ignore"):
            prog = np.where(fin[ids] > st[ids], (t - st[ids]) / (fin[ids] - st[ids]), 1.0)
        pad = np.zeros(ids.size, dtype=bool)
    else:
        rb = np.flatnonzero((lane.b_start <= t) & (t < lane.b_end))
        ids = np.flatnonzero(np.isin(lane.batch_id, rb))
        prog, pad = np.zeros(ids.size), np.zeros(ids.size, dtype=bool)
        for bid in rb:
            members = lane.batch_id[ids] == bid
            bs, be = lane.b_start[bid], lane.b_end[bid]
            frac = (t - bs) / (be - bs) if be > bs else 1.0
            if lane.kind == "static":   # each member decodes its own tokens; the longest sets the pace
                own = lane.output_tokens[ids[members]].astype(float)
                longest = float(own.max()) if own.size else 1.0
                prog[members] = np.minimum(1.0, frac * longest / np.maximum(own, 1.0))
                pad[members] = frac * longest >= own
            else:
                prog[members] = frac
    window = float(min(1.0, age[0] / lane.delay_s)) if lane.delay_s > 0 and q.size else None
    busy, fill = utilization(lane, 0.0, t) if t > 0 else (0.0, 0.0)
    done = int((np.isfinite(fin) & (fin <= t) & np.isfinite(st)).sum())
    return Frame(float(t), q, age, ids, np.clip(prog, 0.0, 1.0), pad, window, done, busy, fill)


def default_horizon(lanes: Sequence[Lane], cap_factor: float = 1.5) -> float:
    """The longest finish among the lanes, but at most `cap_factor` × the last arrival (an
    overloaded lane's queue would stretch the animation without end)."""
    if not lanes:
        raise ValueError("need at least one lane")
    last, end = max(float(lane.arrival.max()) if lane.arrival.size else 0.0 for lane in lanes), max(ln.end for ln in lanes)
    return float(max(min(end, cap_factor * last if last > 0 else end), 1e-6))


def lane_summary(lane: Lane, t0: float | None = None, t1: float | None = None) -> dict[str, float]:
    """Mean / P95 latency (s), mean batch size, η (useful share of the pot's occupied slot-time),
    busy / fill over [t0, t1] (default: first to last arrival) and requests done of one lane."""
    done = np.isfinite(lane.finish) & np.isfinite(lane.start)
    lat = lane.finish[done] - lane.arrival[done]
    a0, a1 = (float(lane.arrival.min()), float(lane.arrival.max())) if lane.arrival.size else (0.0, 0.0)
    busy, fill = utilization(lane, a0 if t0 is None else t0, a1 if t1 is None else t1)
    occupied = (lane.b_end - lane.b_start) * lane.b_size
    nan = float("nan")
    return {
        "latency_mean_s": float(lat.mean()) if lat.size else nan,
        "latency_p95_s": percentile(lat, 95, empty=nan),
        "batch_mean": float(lane.b_size.mean()) if lane.b_size.size else nan,
        "eta": float((occupied * lane.b_useful).sum() / occupied.sum()) if occupied.sum() > 0 else nan,
        "busy": busy, "fill": fill, "done": int(done.sum()),
    }
