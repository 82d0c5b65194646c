"""t_batch(B) measured on the real server: one execution of B rows at a time, timed by Triton.

A request whose input carries B rows (batch dimension B) is one model execution of batch size B
when nothing else is in flight. The statistics extension records that execution under
``batch_stats`` (batch size B: count and compute_input / compute_infer / compute_output ns), so
reading the statistics before and after a *round* — one request per batch size, sent one after
another — gives each batch size's execution time exactly, with no client overhead in it. Rounds
are interleaved (1, 2, 4, …, 1, 2, 4, …) so that a noisy neighbour slows every size alike; the
fastest round per size (or the median) is robust to the odd slow round.

The client's own latency of each request is kept too: it adds gRPC, (de)serialisation and the
Python backend's request handling to the same execution.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from batchlab.theory.formulas import fit_affine

InputsFn = Callable[[int], Mapping[str, np.ndarray]]
"""Batch size B -> the input tensors of one request with B rows (batch dimension first)."""


@dataclass
class BatchTimes:
    """Per batch size: server compute times of single executions and client latencies (ms)."""

    model: str
    sizes: list[int]
    compute_ms: dict[int, np.ndarray]
    """compute_input + compute_infer + compute_output of each execution (ms)."""
    infer_ms: dict[int, np.ndarray]
    """compute_infer alone of each execution (ms): the model's `execute`."""
    latency_ms: dict[int, np.ndarray]
    """Client latency of each request (ms)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def _table(self, which: str) -> dict[int, np.ndarray]:
        table = {"compute": self.compute_ms, "infer": self.infer_ms, "latency": self.latency_ms}.get(which)
        if table is None:
            raise ValueError(f"which must be 'compute', 'infer' or 'latency', not {which!r}")
        return table

    def median(self, which: str = "compute") -> np.ndarray:
        """Median per batch size (ms), in the order of `sizes`; which: compute, infer or latency."""
        table = self._table(which)
        return np.array([float(np.median(table[b])) if table[b].size else math.nan for b in self.sizes])

    def minimum(self, which: str = "compute") -> np.ndarray:
        """Fastest round per batch size (ms). Other processes can only slow an execution down, never
        speed it up, so on a shared machine the minimum is the steadiest estimate of t(B)."""
        table = self._table(which)
        return np.array([float(np.min(table[b])) if table[b].size else math.nan for b in self.sizes])

    def estimate(self, which: str = "compute", stat: str = "min") -> np.ndarray:
        """t(B) per batch size (ms) by ``stat``: 'min' or 'median'."""
        if stat == "min":
            return self.minimum(which)
        if stat == "median":
            return self.median(which)
        raise ValueError(f"stat must be 'min' or 'median', not {stat!r}")

    def fit(self, which: str = "compute", stat: str = "min") -> tuple[float, float]:
        """Least-squares (a, b) of t(B) = a + b·B (ms, ms per item), with a >= 0.

        When noise at large B tilts the unconstrained line below the origin, the fit is redone
        through the origin (a = 0): a fixed cost cannot be negative.
        """
        y = self.estimate(which, stat)
        a, b = fit_affine(self.sizes, y)
        if a < 0:
            x = np.asarray(self.sizes, float)
            a, b = 0.0, float(np.dot(x, y) / np.dot(x, x))
        return a, b

    def speedup(self, which: str = "compute", stat: str = "min") -> np.ndarray:
        """Measured S(B) = B · t(1) / t(B) (needs batch size 1 among the sizes)."""
        if 1 not in self.sizes:
            raise ValueError("speedup needs batch size 1 among the measured sizes")
        est = self.estimate(which, stat)
        t1 = est[self.sizes.index(1)]
        return np.asarray(self.sizes, dtype=float) * t1 / est

    def table(self) -> list[dict[str, float]]:
        """Rows of B, min / median compute, median infer and latency (ms), and the number of executions."""
        mn, mc, mi, ml = self.minimum("compute"), self.median("compute"), self.median("infer"), self.median("latency")
        return [{"B": b, "compute_min_ms": float(m), "compute_ms": float(c), "infer_ms": float(i),
                 "latency_ms": float(l), "n": int(self.compute_ms[b].size)}
                for b, m, c, i, l in zip(self.sizes, mn, mc, mi, ml)]


def _stats(client: Any, model: str):
    from batchlab.load.stats import read_stats

    return read_stats(client, model)


def _executions(stats: Any) -> int:
    return sum(slot.get("compute_infer", (0, 0))[0] for slot in stats.batches.values())


def _settled(client: Any, model: str, base: Any, expect: int, timeout: float = 3.0):
    """Statistics re-read until they count `expect` more successful requests *and* executions
    than `base` (or until `timeout`). The Python backend reports an execution's batch statistics
    after its responses have gone out, so the request count alone can run ahead of batch_stats."""
    deadline = time.monotonic() + timeout
    while True:
        after = _stats(client, model)
        d = after - base
        if (d.success >= expect and _executions(d) >= expect) or time.monotonic() > deadline:
            return after
        time.sleep(0.005)


def _infer_inputs(module: Any, inputs: Mapping[str, np.ndarray]) -> list[Any]:
    from batchlab.load.transport import triton_dtype

    out = []
    for name, arr in inputs.items():
        inp = module.InferInput(name, list(arr.shape), triton_dtype(arr))
        inp.set_data_from_numpy(arr)
        out.append(inp)
    return out


def measure_batch_times(server: Any, model: str, inputs_for: InputsFn, sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
                        rounds: int = 7, warmup_rounds: int = 1, timeout_s: float = 30.0) -> BatchTimes:
    """Time one execution of each batch size in ``sizes``, ``rounds`` times, interleaved.

    ``inputs_for(B)`` gives a request with B rows. Needs the model to yourself while it runs (other
    traffic to the same model would mix into the statistics); raises ValueError on bad arguments
    and RuntimeError when a round's statistics do not show exactly one execution per size.
    """
    import tritonclient.grpc as grpcclient

    sz = [int(b) for b in sizes]
    if not sz or min(sz) < 1 or len(set(sz)) != len(sz):
        raise ValueError(f"sizes must be distinct positive integers, got {list(sizes)}")
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        reqs = {b: _infer_inputs(grpcclient, inputs_for(b)) for b in sz}
        for b in sz:
            first = next(iter(inputs_for(b).values()))
            if first.shape[0] != b:
                raise ValueError(f"inputs_for({b}) must give tensors with {b} rows, got shape {first.shape}")
        # Triton counts a request in its statistics a moment after the client has the answer,
        # so every snapshot waits until it counts all requests sent so far.
        base = _stats(client, model)
        sent = 0
        for _ in range(warmup_rounds):
            for b in sz:
                client.infer(model, reqs[b], client_timeout=timeout_s)
                sent += 1
        comp = {b: [] for b in sz}
        inf = {b: [] for b in sz}
        lat = {b: [] for b in sz}
        before = _settled(client, model, base, sent)
        for _ in range(rounds):
            for b in sz:
                t0 = time.perf_counter()
                client.infer(model, reqs[b], client_timeout=timeout_s)
                lat[b].append((time.perf_counter() - t0) * 1e3)
            sent += len(sz)
            after = _settled(client, model, base, sent)
            d = after - before
            before = after
            for b in sz:
                slot = d.batches.get(b)
                if not slot or slot["compute_infer"][0] != 1:
                    raise RuntimeError(
                        f"round statistics of {model!r} show {slot['compute_infer'][0] if slot else 0} executions "
                        f"of batch size {b}, expected 1: is other traffic reaching the model?")
                inf[b].append(slot["compute_infer"][1] / 1e6)
                comp[b].append(sum(slot[p][1] for p in ("compute_input", "compute_infer", "compute_output")) / 1e6)
    finally:
        client.close()
    arr = lambda d: {b: np.asarray(v, dtype=float) for b, v in d.items()}  # noqa: E731
    return BatchTimes(model, sz, arr(comp), arr(inf), arr(lat), extra={"rounds": rounds})
