"""The server's own view of a run: Triton's statistics extension (cumulative counters since the
model loaded) read before and after, differenced. Per-request sums (queue, compute_*) charge each
request of a batch the whole batch's time; `batch_stats` counts batches.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from batchlab.server import poll as wait_for

PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
BATCH_PHASES = ("compute_input", "compute_infer", "compute_output")


def _executions(slot: Mapping[str, tuple[int, int]]) -> int:
    """Executions of one batch size: the count of compute_infer (of compute_input if none)."""
    return slot.get("compute_infer", (0, 0))[0] or slot.get("compute_input", (0, 0))[0]


def _add(into: dict[str, tuple[int, int]], phase: str, d: Mapping[str, Any] | None) -> None:
    """Add a statistics entry ``{"count", "ns"}`` (None: nothing) to ``into[phase]``."""
    d = d or {}
    c0, ns0 = into.get(phase, (0, 0))
    into[phase] = (c0 + int(d.get("count", 0) or 0), ns0 + int(d.get("ns", 0) or 0))


@dataclass
class ModelStats:
    """Cumulative counters of one model (a snapshot, or the difference of two): ``phases`` phase ->
    (count, total ns); ``batches`` batch size -> phase -> (count of batches, total ns)."""

    model: str
    inference_count: int = 0
    execution_count: int = 0
    phases: dict[str, tuple[int, int]] = field(default_factory=dict)
    batches: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, stats: Mapping[str, Any], model: str | None = None) -> "ModelStats":
        """Parse the statistics JSON (gRPC's strings or HTTP's integers) of `model`, versions summed."""
        entries = stats.get("model_stats", [])
        if model is not None:
            entries = [e for e in entries if e.get("name") == model]
        if not entries:
            raise ValueError(f"the statistics hold no entry for model {model!r}")
        out = cls(model=entries[0].get("name", model or ""))
        for e in entries:
            out.inference_count += int(e.get("inference_count", 0) or 0)
            out.execution_count += int(e.get("execution_count", 0) or 0)
            inf = e.get("inference_stats", {})
            for p in PHASES:
                _add(out.phases, p, inf.get(p))
            for b in e.get("batch_stats", []) or []:
                slot = out.batches.setdefault(int(b.get("batch_size", 0)), {})
                for p in BATCH_PHASES:
                    _add(slot, p, b.get(p))
        return out

    def _combine(self, other: "ModelStats", sign: int, verb: str) -> "ModelStats":
        """Counters of self + sign · other; batch sizes without an execution left out."""
        if other.model != self.model:
            raise ValueError(f"cannot {verb} statistics of {self.model!r} and {other.model!r}")
        out = ModelStats(self.model, self.inference_count + sign * other.inference_count,
                         self.execution_count + sign * other.execution_count)
        pair = lambda a, b: (a[0] + sign * b[0], a[1] + sign * b[1])  # noqa: E731
        for p in PHASES:
            out.phases[p] = pair(self.phases.get(p, (0, 0)), other.phases.get(p, (0, 0)))
        for size in sorted(set(self.batches) | set(other.batches)):
            x, y = self.batches.get(size, {}), other.batches.get(size, {})
            slot = {p: pair(x.get(p, (0, 0)), y.get(p, (0, 0))) for p in BATCH_PHASES}
            if _executions(slot):
                out.batches[size] = slot
        return out

    def __sub__(self, before: "ModelStats") -> "ModelStats":
        """What happened between `before` and this snapshot."""
        return self._combine(before, -1, "difference")

    def __add__(self, other: "ModelStats") -> "ModelStats":
        """Two differences pooled (e.g. repeated rounds of one configuration)."""
        return self._combine(other, 1, "pool")

    @property
    def success(self) -> int:
        """Requests the server completed successfully."""
        return self.phases.get("success", (0, 0))[0]

    @property
    def failed(self) -> int:
        """Requests that failed inside the server (rejections by the scheduler included)."""
        return self.phases.get("fail", (0, 0))[0]

    @property
    def mean_batch_size(self) -> float:
        """Inferences per execution (batch items per model execution); NaN with no execution."""
        return self.inference_count / self.execution_count if self.execution_count else float("nan")

    def mean_ms(self, phase: str) -> float:
        """Mean time per request in `phase` (ms), e.g. 'queue', 'compute_infer', 'success'."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; choose one of {', '.join(PHASES)}")
        c, ns = self.phases.get(phase, (0, 0))
        return ns / c / 1e6 if c else float("nan")

    @property
    def compute_ms(self) -> float:
        """Mean compute time per request (ms): compute_input + compute_infer + compute_output."""
        return sum(self.mean_ms(p) for p in BATCH_PHASES)

    @property
    def busy_seconds(self) -> float:
        """Seconds the model's instances spent executing batches (compute input + infer + output)."""
        return sum(slot.get(p, (0, 0))[1] for slot in self.batches.values() for p in BATCH_PHASES) / 1e9

    def batch_histogram(self) -> dict[int, int]:
        """Executed batch size -> number of batches of that size (from `batch_stats`)."""
        return {s: _executions(slot) for s, slot in sorted(self.batches.items())}

    @property
    def batch_executions(self) -> int:
        """Executions counted in `batch_stats` (all batch sizes)."""
        return sum(self.batch_histogram().values())

    def batch_service_ms(self, min_count: int = 1, infer_only: bool = False) -> dict[int, float]:
        """Batch size -> mean ms of one execution (compute_input + infer + output, or compute_infer
        alone with `infer_only`), for the sizes executed at least `min_count` times."""
        phases = ("compute_infer",) if infer_only else BATCH_PHASES
        return {s: sum(slot.get(p, (0, 0))[1] for p in phases) / _executions(slot) / 1e6
                for s, slot in sorted(self.batches.items()) if _executions(slot) >= max(min_count, 1)}

    def summary(self) -> dict[str, Any]:
        """Counts, mean batch size, histogram and mean per-request times (ms) as a plain dict."""
        return {
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "success": self.success,
            "fail": self.failed,
            "mean_batch_size": self.mean_batch_size,
            "batch_histogram": {str(k): v for k, v in self.batch_histogram().items()},
            **{f"{p}_ms": self.mean_ms(p) for p in ("queue", *BATCH_PHASES)},
            "request_ms": self.mean_ms("success"),
        }


def read_stats(client: Any, model: str, timeout: float = 10.0) -> ModelStats:
    """A snapshot of `model`'s statistics (the one reader of the extension) from a synchronous tritonclient
    (gRPC or HTTP) client, or from a server's HTTP address "host:port" (plain urllib: safe from any thread)."""
    if isinstance(client, str):
        url = f"http://{client}/v2/models/{urllib.parse.quote(model)}/stats"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            js = json.loads(resp.read())
    elif ".http" in type(client).__module__:  # the HTTP client returns JSON already and has no as_json
        js = client.get_inference_statistics(model)
    else:
        js = client.get_inference_statistics(model, as_json=True)
    return ModelStats.from_json(js, model)


def settle(read: Callable[[], ModelStats], before: ModelStats, requests: int, executions: int = 0,
           timeout: float = 3.0, poll: float = 0.01) -> ModelStats:
    """Statistics from `read()`, re-read until they count `requests` more successful requests and
    `executions` more executions than `before` *and* two reads in a row agree on the counts (Triton
    counts a request after its answer is out); after `timeout` s the last read is returned.
    """
    prev: list[tuple[int, int, int] | None] = [None]

    def settled(after: ModelStats) -> bool:
        d = after - before
        key = (after.inference_count, after.execution_count, after.batch_executions)
        same, prev[0] = key == prev[0], key
        return d.success >= requests and d.batch_executions >= executions and same

    return wait_for(read, timeout, interval=poll, done=settled)
