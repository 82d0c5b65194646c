"""Simulation results: per-request and per-execution records (numpy structured arrays), and `SimResult`.

Times in seconds from the start of the run; NaN: did not happen; -1 in integer columns: does not apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchlab._validate import fraction

from .summary import summarize_result

RECORD_DTYPE = np.dtype([
    ("id", np.int64),             # request index (arrival order)
    ("arrival", np.float64),      # when the request reached the server
    ("start", np.float64),        # when it left the queue (first execution it joined)
    ("first_token", np.float64),  # LLM schedulers: when its first output token was produced
    ("finish", np.float64),       # when its response was complete (or when it was dropped)
    ("batch_id", np.int64),       # first execution it joined (row of `SimResult.batches`)
    ("instance", np.int32),       # model instance (or engine) that ran it
    ("prompt_tokens", np.int32),
    ("output_tokens", np.int32),
    ("priority", np.int16),       # priority level (1 = highest); 0 when priorities are off
    ("seq_id", np.int64),         # sequence (correlation id) for the sequence batcher
    ("step", np.int32),           # step within its sequence (0-based)
    ("preemptions", np.int32),    # continuous batching: times its KV was evicted and recomputed
    ("rejected", np.bool_),       # refused: queue full, or sequence slot lost after an idle timeout
    ("timed_out", np.bool_),      # dropped after waiting longer than the queue-policy timeout
])

BATCH_DTYPE = np.dtype([
    ("id", np.int64),
    ("start", np.float64),
    ("end", np.float64),
    ("instance", np.int32),
    ("size", np.int32),             # requests (or sequences) that did work in this execution
    ("executed", np.int32),         # batch elements actually run (padding / null slots included)
    ("prefill_tokens", np.int64),   # token positions computed by prefill (LLM)
    ("decode_seqs", np.int32),      # sequences that decoded one token (LLM)
    ("useful_tokens", np.int64),    # token-steps that someone needed (LLM)
    ("executed_tokens", np.int64),  # token-steps computed, padding and recomputation included (LLM)
    ("kv_tokens", np.int64),        # KV tokens held during this execution (LLM)
])


def empty_records(n: int) -> np.ndarray:
    """``n`` records with defaults: NaN times, -1 indices, zero tokens, no flags."""
    blank = np.zeros((), dtype=RECORD_DTYPE)
    for f in ("start", "first_token", "finish"):
        blank[f] = np.nan
    for f in ("batch_id", "seq_id", "step", "instance"):
        blank[f] = -1
    r = np.empty(n, dtype=RECORD_DTYPE)
    # one pass over memory, the blank record's bytes copied into each row (np.full with a structured
    # value, or field by field, takes twice as long)
    r.view(np.uint8).reshape(n, RECORD_DTYPE.itemsize)[:] = np.frombuffer(blank.tobytes(), np.uint8)
    r["id"] = np.arange(n)
    return r


def make_batches(n: int) -> np.ndarray:
    """``n`` execution records (zeros; ``id`` filled)."""
    b = np.zeros(n, dtype=BATCH_DTYPE)
    b["id"] = np.arange(n)
    return b


@dataclass
class SimResult:
    """What a simulation produced: ``records`` (one row per request, `RECORD_DTYPE`), ``batches`` (one per
    execution or LLM iteration, `BATCH_DTYPE`), the ``scheduler`` and its ``config``, ``capacity_rps``
    with a long queue (None without a closed form), and the ``warmup`` fraction `summary` leaves out."""

    records: np.ndarray
    batches: np.ndarray
    scheduler: str
    config: dict[str, Any]
    instances: int = 1
    capacity_rps: float | None = None
    warmup: float = 0.1
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fraction("warmup", self.warmup)

    def __len__(self) -> int:
        return int(self.records.size)

    def summary(self, warmup: float | None = None) -> dict[str, Any]:
        """Throughput, latency, queue time, TTFT, batch sizes, utilisation, η, KV, stability (see `summary.summarize_result`)."""
        return summarize_result(self, self.warmup if warmup is None else warmup)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Per-request columns as a dict of plain arrays, plus derived ``latency`` and ``queue`` (s)."""
        out = {name: np.asarray(self.records[name]) for name in RECORD_DTYPE.names}
        out["latency"] = out["finish"] - out["arrival"]
        out["queue"] = out["start"] - out["arrival"]
        out["ttft"] = out["first_token"] - out["arrival"]
        return out

    def queue_length_at(self, times: np.ndarray) -> np.ndarray:
        """Requests waiting (arrived, not started, not dropped yet) at each of ``times``."""
        r = self.records
        return self._present_at(times, np.where(np.isnan(r["start"]), r["finish"], r["start"]))

    def in_system_at(self, times: np.ndarray) -> np.ndarray:
        """Requests in the server (arrived, response not yet complete or dropped) at each of ``times``."""
        return self._present_at(times, self.records["finish"])

    def _present_at(self, times: np.ndarray, left: np.ndarray) -> np.ndarray:
        """Requests arrived and not yet ``left`` (NaN: never) at each of ``times``."""
        t = np.asarray(times, dtype=np.float64)
        arrived = np.searchsorted(np.sort(self.records["arrival"]), t, side="right")
        return arrived - np.searchsorted(np.sort(left[~np.isnan(left)]), t, side="right")
