"""T_total = T_queue + T_prefill + T_decode + T_overhead of `generate`, measured on the real server.

No counter separates prefill from decode inside one execution, so `calibrate_generate` times single
executions with MAX_TOKENS = 1 (prefill t_p(B)) and N (prefill + N − 1 decode steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from batchlab._validate import count
from batchlab.models.requests import generate_inputs
from batchlab.probe.batch_time import BatchTimes, measure_batch_times
from batchlab.sim.service import TokenCost
from batchlab.theory.formulas import fit_affine


@dataclass
class GenerateCalibration:
    """Prefill and decode-step times of `generate` per batch size (ms), from single executions."""

    sizes: list[int]
    prompt_len: int
    n_tokens: int
    prefill: BatchTimes
    full: BatchTimes

    @property
    def prefill_ms(self) -> np.ndarray:
        """t_p(B): one execution with MAX_TOKENS = 1 (fastest of the rounds)."""
        return self.prefill.minimum("compute")

    @property
    def full_ms(self) -> np.ndarray:
        """t(B, N): one execution with MAX_TOKENS = N (fastest of the rounds)."""
        return self.full.minimum("compute")

    @property
    def step_ms(self) -> np.ndarray:
        """t_step(B) = (t(B, N) − t_p(B)) / (N − 1): one decode step of B sequences."""
        return (self.full_ms - self.prefill_ms) / (self.n_tokens - 1)

    def step_fit(self) -> tuple[float, float]:
        """(a, b) of t_step(B) = a + b·B (ms), with a, b >= 0."""
        return fit_affine(self.sizes, self.step_ms, nonneg=True)

    def prefill_at(self, batch_size: float | np.ndarray) -> float | np.ndarray:
        """t_p at any batch size, interpolated linearly between the measured ones (ms)."""
        return np.interp(batch_size, self.sizes, self.prefill_ms)

    def token_cost(self) -> Any:
        """The simulator's `TokenCost` (µs): the step fit, and prefill = decode_base +
        prefill_per_token·B·P (P prompt tokens) with its slope fitted through the measured t_p(B)."""
        a, b = self.step_fit()
        a = max(a, 1e-3)
        x = np.asarray(self.sizes, float) * self.prompt_len
        y = self.prefill_ms - a
        ppt = max(float(np.dot(x, y) / np.dot(x, x)), 0.0)
        return TokenCost(prefill_per_token=ppt * 1e3, decode_base=a * 1e3, decode_per_seq=b * 1e3)

    def table(self) -> list[dict[str, float]]:
        """Rows: B, t_p, t(B, N), t_step, and the per-token cost of one sequence t_step / B (ms)."""
        return [{"B": b, "prefill_ms": float(p), "full_ms": float(f), "step_ms": float(s),
                 "step_per_seq_ms": float(s) / b}
                for b, p, f, s in zip(self.sizes, self.prefill_ms, self.full_ms, self.step_ms)]


def _rows_of(prompt: Sequence[int], max_tokens: int) -> Any:
    """B -> one `generate` request of B copies of ``prompt`` (IGNORE_EOS: exactly ``max_tokens`` each)."""
    return lambda b: generate_inputs(prompt, max_tokens, ignore_eos=True, rows=b)


def calibrate_generate(server: Any, prompt: Sequence[int], sizes: Sequence[int] = (1, 4, 16),
                       n_tokens: int = 16, rounds: int = 3, model: str = "generate") -> GenerateCalibration:
    """Measure t_p(B) and t(B, N) of ``model`` with single executions, the two kinds alternating round
    by round: t_step is their difference, so both fastest rounds must come from the same stretch of
    time (measured one phase after the other, a machine that got busier between the phases inflates
    t(B, N) alone, and most at the largest B)."""
    if n_tokens < 2:
        raise ValueError("n_tokens must be >= 2 to see a decode step")
    count("rounds", rounds)
    pre: list[BatchTimes] = []
    full: list[BatchTimes] = []
    for r in range(rounds):
        warm = 1 if r == 0 else 0
        pre.append(measure_batch_times(server, model, _rows_of(prompt, 1), sizes, rounds=1, warmup_rounds=warm))
        full.append(measure_batch_times(server, model, _rows_of(prompt, n_tokens), sizes, rounds=1,
                                        warmup_rounds=warm))
    return GenerateCalibration([int(b) for b in sizes], len(prompt), int(n_tokens),
                               BatchTimes.joined(pre), BatchTimes.joined(full))


def split_report(report: Any, calib: GenerateCalibration) -> dict[str, float]:
    """Mean T_queue, T_prefill, T_decode, T_overhead and T_total (ms) of a `generate` load run, the
    server's mean batch size and ``batch_seen`` (the batch size the average request ran in)."""
    s = report.server
    if s is None or not s.success:
        raise ValueError("the report has no server statistics (run the load with stats=True)")
    total = report.latency_ms()["mean"]
    queue = s.mean_ms("queue")
    compute = s.compute_ms
    hist = s.batch_histogram()
    sizes = np.array(list(hist.keys()), float)
    counts = np.array(list(hist.values()), float)
    weight = sizes * counts  # requests that ran in batches of each size
    if weight.sum() <= 0:
        raise ValueError("the server statistics show no executions")
    prefill = float(np.sum(weight * calib.prefill_at(sizes)) / weight.sum())
    return {
        "queue": queue,
        "prefill": prefill,
        "decode": compute - prefill,
        "overhead": total - queue - compute,
        "total": total,
        "batch": s.mean_batch_size,
        "batch_seen": float(np.sum(weight * sizes) / weight.sum()),
    }


def split_simulated(result: Any) -> dict[str, float]:
    """Mean T_queue, T_prefill, T_decode and T_total (ms) of a simulated generation run (no overhead)."""
    r = result.records
    ok = np.isfinite(r["finish"]) & np.isfinite(r["start"])
    r = r[ok]
    if r.size == 0:
        return {p: math.nan for p in ("queue", "prefill", "decode", "overhead", "total")}
    q = (r["start"] - r["arrival"]).mean() * 1e3
    p = (r["first_token"] - r["start"]).mean() * 1e3
    d = (r["finish"] - r["first_token"]).mean() * 1e3
    b = result.batches["size"]
    return {"queue": float(q), "prefill": float(p), "decode": float(d), "overhead": 0.0,
            "total": float(q + p + d), "batch": float(b.mean()) if b.size else math.nan}
