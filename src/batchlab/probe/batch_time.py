"""t_batch(B) measured on the real server: single executions of B rows timed by Triton's statistics
extension (`measure_batch_times`, `calibrate_service`), or read from the statistics of any run
(`batch_table` and what builds on it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tritonclient.grpc as grpcclient

from batchlab._validate import count, positive
from batchlab.load.stats import ModelStats, read_stats, settle
from batchlab.load.transport import infer_inputs
from batchlab.models.requests import random_embed_inputs
from batchlab.sim.service import Table
from batchlab.theory.formulas import fit_affine

InputsFn = Callable[[int], Mapping[str, np.ndarray]]
"""Batch size B -> the input tensors of one request with B rows (batch dimension first)."""


@dataclass
class BatchTimes:
    """Per batch size, each round's ``compute_ms`` (compute_input + infer + output), ``infer_ms``
    (compute_infer: the model's `execute`) and client ``latency_ms``."""

    model: str
    sizes: list[int]
    compute_ms: dict[int, np.ndarray]
    infer_ms: dict[int, np.ndarray]
    latency_ms: dict[int, np.ndarray]

    def _per_size(self, which: str, stat: Callable[[np.ndarray], Any]) -> np.ndarray:
        table = {"compute": self.compute_ms, "infer": self.infer_ms, "latency": self.latency_ms}.get(which)
        if table is None:
            raise ValueError(f"which must be 'compute', 'infer' or 'latency', not {which!r}")
        return np.array([float(stat(table[b])) if table[b].size else math.nan for b in self.sizes])

    def median(self, which: str = "compute") -> np.ndarray:
        """Median per batch size (ms), in the order of `sizes`; which: compute, infer or latency."""
        return self._per_size(which, np.median)

    def minimum(self, which: str = "compute") -> np.ndarray:
        """Fastest round per batch size (ms): contention only slows executions, so the steadiest t(B)."""
        return self._per_size(which, np.min)

    def fit(self) -> tuple[float, float]:
        """Least-squares (a, b) of t(B) = a + b·B (ms, ms per item) through each size's fastest round,
        with a, b >= 0 (`fit_affine`)."""
        return fit_affine(self.sizes, self.minimum(), nonneg=True)

    def speedup(self) -> np.ndarray:
        """Measured S(B) = B · t(1) / t(B) from each size's fastest round (needs batch size 1 among the sizes)."""
        if 1 not in self.sizes:
            raise ValueError("speedup needs batch size 1 among the measured sizes")
        est = self.minimum()
        return np.asarray(self.sizes, dtype=float) * est[self.sizes.index(1)] / est

    @classmethod
    def joined(cls, parts: Sequence["BatchTimes"]) -> "BatchTimes":
        """One `BatchTimes` holding every round of ``parts`` (same model and sizes), in order."""
        first = parts[0]
        tables = {attr: {b: np.concatenate([getattr(p, attr)[b] for p in parts]) for b in first.sizes}
                  for attr in ("compute_ms", "infer_ms", "latency_ms")}
        return cls(first.model, first.sizes, **tables)

    def table(self) -> list[dict[str, float]]:
        """Rows of B, min / median compute, median infer and latency (ms), and the number of executions."""
        mn, mc, mi, ml = self.minimum("compute"), self.median("compute"), self.median("infer"), self.median("latency")
        return [{"B": b, "compute_min_ms": float(m), "compute_ms": float(c), "infer_ms": float(i),
                 "latency_ms": float(lat), "n": int(self.compute_ms[b].size)}
                for b, m, c, i, lat in zip(self.sizes, mn, mc, mi, ml)]


def _settled(client: Any, model: str, base: ModelStats, expect: int) -> ModelStats:
    """Statistics once they count `expect` more requests and executions than `base` (`settle`)."""
    return settle(lambda: read_stats(client, model), base, expect, expect)


def measure_batch_times(server: Any, model: str, inputs_for: InputsFn, sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
                        rounds: int = 7, warmup_rounds: int = 1, timeout_s: float = 30.0,
                        requests_per_round: int | Callable[[int], int] = 1) -> BatchTimes:
    """Time the executions of each batch size, ``rounds`` interleaved rounds of ``requests_per_round``
    (a number or a function of B) requests ``inputs_for(B)`` sent one at a time. Needs the model to
    itself: RuntimeError when a round's statistics do not show one execution per request.
    """
    sz = [int(b) for b in sizes]
    if not sz or min(sz) < 1 or len(set(sz)) != len(sz):
        raise ValueError(f"sizes must be distinct positive integers, got {list(sizes)}")
    count("rounds", rounds)
    per = {b: int(requests_per_round(b) if callable(requests_per_round) else requests_per_round) for b in sz}
    if min(per.values()) < 1:
        raise ValueError(f"requests_per_round must be >= 1 for every size, got {per}")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        reqs = {b: infer_inputs(grpcclient, inputs_for(b)) for b in sz}
        for b in sz:
            first = next(iter(inputs_for(b).values()))
            if first.shape[0] != b:
                raise ValueError(f"inputs_for({b}) must give tensors with {b} rows, got shape {first.shape}")
        # Triton counts a request a moment after the client has the answer: wait for all of them.
        base = read_stats(client, model)
        sent = 0
        for _ in range(warmup_rounds):
            for b in sz:
                client.infer(model, reqs[b], client_timeout=timeout_s)
                sent += 1
        comp, inf, lat = ({b: [] for b in sz} for _ in range(3))
        before = _settled(client, model, base, sent)
        for _ in range(rounds):
            round_lat = {b: [] for b in sz}
            for b in sz:
                for _ in range(per[b]):
                    t0 = time.perf_counter()
                    client.infer(model, reqs[b], client_timeout=timeout_s)
                    round_lat[b].append((time.perf_counter() - t0) * 1e3)
                sent += per[b]
            after = _settled(client, model, base, sent)
            d = after - before
            before = after
            hist, service, infer = d.batch_histogram(), d.batch_service_ms(), d.batch_service_ms(infer_only=True)
            for b in sz:
                if hist.get(b, 0) != per[b]:
                    raise RuntimeError(
                        f"round statistics of {model!r} show {hist.get(b, 0)} executions "
                        f"of batch size {b}, expected {per[b]}: is other traffic reaching the model?")
                inf[b].append(infer[b])
                comp[b].append(service[b])
                lat[b].append(float(np.median(round_lat[b])))
    finally:
        client.close()
    arr = lambda d: {b: np.asarray(v, dtype=float) for b, v in d.items()}  # noqa: E731
    return BatchTimes(model, sz, arr(comp), arr(inf), arr(lat))


@dataclass
class Calibration:
    """t(B) measured on the real server (ms per batch size): ``compute_ms`` compute_infer,
    ``service_ms`` compute_input + infer + output, ``client_ms`` client latency; ``overhead_ms``:
    client minus service time at the smallest size, a constant the simulator adds to each latency.
    """

    model: str
    batch_sizes: list[int]
    compute_ms: dict[int, float]
    service_ms: dict[int, float]
    client_ms: dict[int, float]
    overhead_ms: float

    @classmethod
    def from_times(cls, times: BatchTimes) -> "Calibration":
        """Each size's fastest round by service time (with its compute_infer) and fastest client latency."""
        compute, service, client = {}, {}, {}
        for b in times.sizes:
            i = int(np.argmin(times.compute_ms[b]))
            service[b] = float(times.compute_ms[b][i])
            compute[b] = float(times.infer_ms[b][i])
            client[b] = float(np.min(times.latency_ms[b]))
        b0 = times.sizes[0]
        return cls(times.model, list(times.sizes), compute, service, client, max(0.0, client[b0] - service[b0]))

    def service(self, scale: float = 1.0) -> Table:
        """The simulator `Table` of the measured service times, each multiplied by ``scale`` (`load_factor`)."""
        scale = positive("scale", scale)
        return Table(tuple(sorted(self.service_ms)), tuple(self.service_ms[b] * scale for b in sorted(self.service_ms)),
                     unit="ms")


def calibrate_service(server: Any, model: str = "embed", batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
                      rows_per_size: int = 96, min_requests: int = 6, warmup_requests: int = 2,
                      rounds: int = 3, inputs_for: InputsFn | None = None) -> Calibration:
    """One execution's time at each batch size (`measure_batch_times`), each size's fastest round:
    about ``rows_per_size`` rows (at least ``min_requests`` requests) per size over ``rounds``
    interleaved rounds, after ``warmup_requests`` of each; ``inputs_for(B)`` builds a request
    (default: `random_embed_inputs` seeded with B).
    """
    sizes = sorted({int(b) for b in batch_sizes})  # measure_batch_times checks them and `rounds`
    build = inputs_for or (lambda b: random_embed_inputs(b, seed=b))
    times = measure_batch_times(server, model, build, sizes, rounds=rounds, warmup_rounds=warmup_requests,
                                requests_per_round=lambda b: max(-(-min_requests // rounds),
                                                                 -(-rows_per_size // (b * rounds))))
    return Calibration.from_times(times)


def batch_table(stats: ModelStats, min_count: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes, mean ms per execution, executions) of the sizes a run's statistics executed at least
    ``min_count`` times (`ModelStats.batch_service_ms`); ValueError when there is none."""
    ms = stats.batch_service_ms(min_count)
    if not ms:
        raise ValueError(f"no batch size was executed often enough ({min_count} times or more): "
                         "nothing to calibrate from")
    hist = stats.batch_histogram()
    return np.array(list(ms)), np.array(list(ms.values())), np.array([hist[b] for b in ms], dtype=float)


def service_from_stats(stats: ModelStats, min_batches: int = 3) -> Table:
    """A simulator `Table` from the batch times a real run had (`batch_table`)."""
    sizes, ms, _ = batch_table(stats, min_batches)
    return Table(tuple(int(b) for b in sizes), tuple(float(t) for t in ms), unit="ms")


def load_factor(cal: Calibration, stats: ModelStats, min_batches: int = 5) -> float:
    """How much slower a run's executions (``stats``) ran than ``cal``: the run's mean over the
    calibrated time per batch size (executed >= ``min_batches`` times), weighted by executions."""
    table = cal.service()
    sizes, ms, counts = batch_table(stats, min_batches)
    r = np.asarray([t / (table.time(int(b)) * 1e3) for b, t in zip(sizes, ms)], dtype=float)
    return float((counts * r).sum() / counts.sum())


def isotonic(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of `y` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [value, weight, length]
    for yi, wi in zip(y.tolist(), w.tolist()):
        blocks.append([yi, wi, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.concatenate([[v] * n for v, _, n in blocks])


def service_model(stats: ModelStats, min_count: int = 3) -> dict[str, Any]:
    """t(b) of a run's statistics (`batch_table`): the raw points, smoothed (`isotonic`: never
    falling as b grows) and an affine summary (`fit_affine` weighted by executions, a, b >= 0)."""
    sizes, ms, counts = batch_table(stats, min_count)
    affine = (fit_affine(sizes, ms, weights=counts, nonneg=True) if len(sizes) > 1 else (float(ms[0]), 0.0))
    return {"sizes": sizes, "raw_ms": ms, "counts": counts, "smooth_ms": isotonic(ms, counts), "affine_ms": affine}


def speedup_ceiling(model: dict[str, Any], t1_ms: float, max_b: int = 16) -> dict[str, float] | None:
    """Best b · t(1) / t(b) over b <= max_b on the smoothed table: what batching can give at most."""
    sizes, smooth = model["sizes"], model["smooth_ms"]
    keep = sizes <= max_b
    if not keep.any() or t1_ms <= 0:
        return None
    gain = sizes[keep] * t1_ms / smooth[keep]
    k = int(np.argmax(gain))
    return {"speedup": float(gain[k]), "at_batch": int(sizes[keep][k]), "t1_ms": float(t1_ms),
            "t_b_ms": float(smooth[keep][k])}
