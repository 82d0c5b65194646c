"""Triton's Prometheus endpoint (``http://127.0.0.1:<metrics port>/metrics``), parsed with
prometheus_client's text parser; `MetricsTimeline` scrapes it in a thread while a load runs.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

LabelSet = tuple[tuple[str, str], ...]


@dataclass
class MetricsSnapshot:
    """All samples of one scrape: sample name -> label set -> value; and each family's type."""

    samples: dict[str, dict[LabelSet, float]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "MetricsSnapshot":
        """Parse Prometheus exposition text with `text_string_to_metric_families`.

        The parser names counter samples ``<family>_total``; they are stored under the family's
        name, the name Triton documents (``nv_inference_count``, not ``nv_inference_count_total``).
        """
        snap = cls()
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                name = fam.name if fam.type == "counter" and s.name == f"{fam.name}_total" else s.name
                snap.samples.setdefault(name, {})[tuple(sorted(s.labels.items()))] = float(s.value)
                snap.types[name] = fam.type
        return snap

    def get(self, name: str, default: float = 0.0, **labels: str) -> float:
        """Sum of the samples called `name` whose labels include `labels` (e.g. model='embed')."""
        want = set(labels.items())
        vals = [v for k, v in self.samples.get(name, {}).items() if want <= set(k)]
        return float(sum(vals)) if vals else default

    def by_label(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """`name`'s samples matching `labels`, summed per value of `label` (e.g. reason)."""
        out: dict[str, float] = {}
        want = set(labels.items())
        for k, v in self.samples.get(name, {}).items():
            d = dict(k)
            if want <= set(k) and label in d:
                out[d[label]] = out.get(d[label], 0.0) + v
        return out

    def __sub__(self, before: "MetricsSnapshot") -> "MetricsSnapshot":
        """Counters differenced (gauges keep their latest value)."""
        out = MetricsSnapshot(types=dict(self.types))
        for name, series in self.samples.items():
            is_gauge = self.types.get(name) == "gauge"
            old = before.samples.get(name, {})
            out.samples[name] = {k: (v if is_gauge else v - old.get(k, 0.0)) for k, v in series.items()}
        return out

    def model_summary(self, model: str) -> dict[str, float]:
        """The per-model figures a report needs, from this scrape (or difference of two)."""
        g = lambda n: self.get(n, model=model)  # noqa: E731
        success, count, execs = g("nv_inference_request_success"), g("nv_inference_count"), g("nv_inference_exec_count")
        out = {
            "request_success": success,
            "request_failure": g("nv_inference_request_failure"),
            "failure_by_reason": self.by_label("nv_inference_request_failure", "reason", model=model),
            "inference_count": count,
            "exec_count": execs,
            "mean_batch_size": count / execs if execs else float("nan"),
            "pending_request_count": g("nv_inference_pending_request_count"),
        }
        for what in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
            us = g(f"nv_inference_{what}_duration_us")
            out[f"{what}_ms_per_request"] = us / 1000 / success if success else float("nan")
        return out


def fetch_metrics_text(metrics_url: str, timeout: float = 5.0) -> str:
    """The raw exposition text of ``http://<metrics_url>/metrics``."""
    url = metrics_url if "://" in metrics_url else f"http://{metrics_url}"
    with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=timeout) as resp:
        return resp.read().decode("utf-8", errors="replace")


def scrape(metrics_url: str, timeout: float = 5.0) -> MetricsSnapshot:
    """Scrape and parse Triton's metrics endpoint (``host:port``, loopback for the course)."""
    return MetricsSnapshot.parse(fetch_metrics_text(metrics_url, timeout))


def families(text: str, prefix: str = "nv_") -> Iterable[tuple[str, str, str]]:
    """(name, type, help) of each metric family in `text` whose name starts with `prefix`."""
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith(prefix):
            yield fam.name, fam.type, fam.documentation


@dataclass
class MetricsTimeline:
    """Scrape `metrics_url` every `interval` s in a thread (use as a context manager).

    `snapshots` holds (time since start, `MetricsSnapshot`) pairs; `rows(model)` turns them into
    per-interval figures.
    """

    metrics_url: str
    interval: float = 0.2
    snapshots: list[tuple[float, MetricsSnapshot]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError("interval must be > 0 seconds")

    def _run(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.is_set():
            t = time.perf_counter() - t0
            try:
                self.snapshots.append((t, scrape(self.metrics_url, timeout=2.0)))
            except Exception as exc:  # keep scraping; report at the end
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(max(0.0, self.interval - (time.perf_counter() - t0 - t)))

    def __enter__(self) -> "MetricsTimeline":
        """Start scraping in a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("this timeline has already run")
        self._thread = threading.Thread(target=self._run, name="metrics-timeline", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop scraping and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=5.0)

    def rows(self, model: str) -> list[dict[str, float]]:
        """See `timeline_rows`."""
        return timeline_rows(self.snapshots, model)

    def series(self, model: str, *names: str) -> np.ndarray:
        """One row per scrape: the time (s since start), then each metric in `names` for `model`
        as scraped (counters cumulative, gauges as they were); shape (scrapes, 1 + len(names))."""
        return np.array([[t, *(s.get(n, model=model) for n in names)] for t, s in self.snapshots],
                        dtype=float).reshape(len(self.snapshots), 1 + len(names))


def timeline_rows(snapshots: Sequence[tuple[float, MetricsSnapshot]], model: str) -> list[dict[str, float]]:
    """Per interval between consecutive scrapes: t (s, end of interval), requests/s, queue_ms
    (queue time per successful request), mean_batch (inferences / executions), pending (the
    gauge at the end), exec_per_s. Intervals without requests have NaN ratios.

    Triton counts a batch's inferences just before its execution, so a scrape can fall between the
    two. Intervals are merged until their counts are settled: one with inferences but no execution
    grows into the next; one with fewer inferences than executions (its start caught a batch half
    counted) is merged into the previous ones (dropped if there are none); an unsettled last
    interval is dropped. So every reported mean batch is >= 1."""
    spans: list[tuple[float, MetricsSnapshot, float, MetricsSnapshot]] = []
    start = snapshots[0] if snapshots else None
    for t1, b in snapshots[1:]:
        t0, a = start
        if t1 <= t0:
            continue
        inf, ex = _deltas(a, b, model)[1:3]
        while inf < ex and spans:  # merge back until the interval starts where the counts agree
            t0, a = spans.pop()[:2]
            inf, ex = _deltas(a, b, model)[1:3]
        if inf >= ex and (ex > 0 or inf == 0):
            spans.append((t0, a, t1, b))
            start = (t1, b)
        elif inf < ex:
            start = (t1, b)  # nothing earlier to merge into: dropped
        else:
            start = (t0, a)  # inferences without an execution: grow into the next interval
    rows = []
    for t0, a, t1, b in spans:
        ok, inf, ex, q = _deltas(a, b, model)
        dt = t1 - t0
        rows.append({"t": t1, "rps": ok / dt, "queue_ms": q / 1e3 / ok if ok else math.nan,
                     "mean_batch": inf / ex if ex else math.nan,
                     "pending": b.get("nv_inference_pending_request_count", model=model), "exec_per_s": ex / dt})
    return rows


def _deltas(a: MetricsSnapshot, b: MetricsSnapshot, model: str) -> tuple[float, float, float, float]:
    """Successes, inferences, executions and queue time (us) of `model` from scrape `a` to `b`."""
    names = ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count",
             "nv_inference_queue_duration_us")
    return tuple(b.get(n, model=model) - a.get(n, model=model) for n in names)  # type: ignore[return-value]
