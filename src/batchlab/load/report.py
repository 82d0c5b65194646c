"""A load run's report: what the client measured, what the server says, and how they add up:
client latency = queue + compute + server other (the rest of the server's request time) + overhead
(what the client saw beyond it: network, (de)serialisation, the client's event loop).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchlab.load.records import Records
from batchlab.load.stats import ModelStats
from batchlab.sim.summary import percentile_summary

RATE_TOLERANCE = 0.05  # An open-loop client sending more than this fraction below its schedule's rate fell behind...

MIN_LAG_S = 0.005  # ...if its sending also took this much longer than scheduled (less is timer jitter).


class ClientFellBehind(UserWarning):
    """An open-loop client sent its requests slower than the rate it was asked for."""


def json_ready(v: Any, digits: int | None = None) -> Any:
    """JSON-safe copy: NaN/inf -> None, numpy scalars -> Python, dict keys -> str, floats rounded to
    ``digits`` decimals when given; nested dicts, lists and tuples cleaned."""
    if isinstance(v, dict):
        return {str(k): json_ready(x, digits) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_ready(x, digits) for x in v]
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if not math.isfinite(f) else (f if digits is None else round(f, digits))
    if isinstance(v, np.integer):
        return int(v)
    return v


@dataclass
class LoadReport:
    """One load run (closed or open loop). Over the measured phase: ``wall_s`` the phase's start to
    the last completion, ``client_cpu_s`` the client's CPU, ``server`` the statistics-extension difference,
    ``metrics`` the Prometheus one. ``unit``: what a record is ('request', 'stream', 'sequence')."""

    model: str
    mode: str
    protocol: str
    records: Records
    wall_s: float
    client_cpu_s: float
    concurrency: int | None = None
    offered_rate: float | None = None
    server: ModelStats | None = None
    metrics: dict[str, Any] | None = None
    label: str = ""
    unit: str = "request"

    @property
    def n(self) -> int:
        """Requests in the measured phase."""
        return len(self.records)

    @property
    def n_ok(self) -> int:
        """Requests answered without error."""
        return int(self.records.ok.sum())

    @property
    def n_errors(self) -> int:
        """Requests that failed (rejections included)."""
        return self.n - self.n_ok

    @property
    def n_rejected(self) -> int:
        """Requests Triton's scheduler refused (queue full or queue timeout)."""
        return int(self.records.rejected.sum())

    @property
    def throughput_rps(self) -> float:
        """Successful requests per second over the measured phase."""
        return self.n_ok / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def tokens(self) -> int:
        """Tokens returned by successful requests."""
        return int(self.records.tokens[self.records.ok].sum())

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second over the measured phase."""
        return self.tokens / self.wall_s if self.wall_s > 0 else math.nan

    def latency_ms(self) -> dict[str, float]:
        """Client latency (send to last response) of successful requests: mean, p50..p99, max (ms)."""
        return percentile_summary(self.records.latency)

    def ttft_ms(self) -> dict[str, float]:
        """Time to first token (first response) of successful requests (ms)."""
        return percentile_summary(self.records.ttft)

    def tpot_ms(self) -> dict[str, float]:
        """Per-token latency after the first token, per request (ms)."""
        return percentile_summary(self.records.tpot)

    def lateness_ms(self) -> dict[str, float]:
        """How late open-loop sends left after their scheduled times (ms); NaN for closed loop."""
        return percentile_summary(self.records.lateness)

    def sent_rate_rps(self) -> float:
        """The rate the client actually sent at: gaps between first and last send per second."""
        return _span_rate(self.records.sent)

    def scheduled_rate_rps(self) -> float:
        """Open loop: the rate of the schedule the client was given (a Poisson draw differs from λ by
        about 1/sqrt(n)), counted like `sent_rate_rps`; NaN for closed loop."""
        return _span_rate(self.records.scheduled)

    def rate_shortfall(self) -> float:
        """Open loop: 1 - sent rate / scheduled rate; NaN for closed loop."""
        return 1.0 - self.sent_rate_rps() / self.scheduled_rate_rps()

    def client_fell_behind(self) -> bool | None:
        """Open loop: True past `RATE_TOLERANCE` and `MIN_LAG_S`; None for closed loop or < 2 sends."""
        short = self.rate_shortfall()
        if math.isnan(short):
            return None
        sent, sched = self.records.sent, self.records.scheduled
        stretch = (np.nanmax(sent) - np.nanmin(sent)) - (np.nanmax(sched) - np.nanmin(sched))
        return bool(short > RATE_TOLERANCE and stretch >= MIN_LAG_S)

    def requested_rate_rps(self) -> float:
        """What the run asked for: the `rate` given (λ), else the schedule's own rate."""
        return float(self.offered_rate) if self.offered_rate else self.scheduled_rate_rps()

    def rate_note(self) -> str | None:
        """A plain Chinese sentence saying that the client fell behind (None when it kept up)."""
        if not self.client_fell_behind():
            return None
        sent, asked, sched = self.sent_rate_rps(), self.requested_rate_rps(), self.scheduled_rate_rps()
        base, own = asked, ""
        if abs(sched - asked) > 0.02 * asked:  # a Poisson draw off its λ: judge against the draw
            base, own = sched, f"（这份泊松时间表本身的速率；设定的 λ = {_fmt_rate(asked)}）"
        late = self.lateness_ms()
        return (f"注意：实际发出速率 {_fmt_rate(sent)} 请求/秒，比要求的 {_fmt_rate(base)} 请求/秒{own}"
                f"低 {100 * (1 - sent / base):.0f}%——客户端跟不上，这不是 {_fmt_rate(asked)} 请求/秒下的测量"
                f"（发送比时间表平均晚 {late['mean']:.1f} ms，最晚 {late['max']:.1f} ms）。")

    def client_kept_up(self, tolerance_ms: float = 10.0) -> bool | None:
        """Open loop: True when the p95 send lateness (not p99: a shared machine stalls now and then)
        stayed under `tolerance_ms`."""
        late = self.lateness_ms()["p95"]
        return None if math.isnan(late) else bool(late <= tolerance_ms)

    def mean_batch_size(self) -> float:
        """Batch items per model execution, from the server's statistics."""
        return self.server.mean_batch_size if self.server else math.nan

    def batch_histogram(self) -> dict[int, int]:
        """Executed batch size -> number of executions, from the server's `batch_stats`."""
        return self.server.batch_histogram() if self.server else {}

    def split_ms(self) -> dict[str, float]:
        """Mean client latency split into queue, compute, server other and overhead (ms); per step for
        sequences, NaN parts for decoupled streams (their server time ends before the last response)."""
        total = self.latency_ms()["mean"]
        if self.unit == "sequence":
            with np.errstate(invalid="ignore", divide="ignore"):
                per_step = self.records.latency / np.where(self.records.tokens > 0, self.records.tokens, np.nan)
            total = percentile_summary(per_step)["mean"]
        if self.server is None or not self.server.success or self.unit == "stream":
            return {"queue": math.nan, "compute": math.nan, "server_other": math.nan,
                    "overhead": math.nan, "total": total}
        s = self.server
        queue = s.mean_ms("queue")
        compute = s.compute_ms
        server_total = s.mean_ms("success")
        return {"queue": queue, "compute": compute, "server_other": server_total - queue - compute,
                "overhead": total - server_total, "total": total}

    def summary(self) -> dict[str, Any]:
        """The report as a JSON-ready dict (NaN becomes None)."""
        out: dict[str, Any] = {
            "label": self.label or self.model,
            "model": self.model,
            "mode": self.mode,
            "protocol": self.protocol,
            "unit": self.unit,
            "concurrency": self.concurrency,
            "offered_rate_rps": self.offered_rate,
            "requests": self.n,
            "ok": self.n_ok,
            "errors": self.n_errors,
            "rejected": self.n_rejected,
            "error_kinds": self.records.errors(),
            "wall_s": self.wall_s,
            "throughput_rps": self.throughput_rps,
            "latency_ms": self.latency_ms(),
        }
        if self.unit != "request" or self.tokens > self.n_ok:  # streams, sequences, generation
            out.update(tokens=self.tokens, tokens_per_s=self.tokens_per_s,
                       ttft_ms=self.ttft_ms(), tpot_ms=self.tpot_ms())
        out["sent_rate_rps"] = self.sent_rate_rps()
        if self.mode == "open":
            out.update(requested_rate_rps=self.requested_rate_rps(), scheduled_rate_rps=self.scheduled_rate_rps(), rate_shortfall=self.rate_shortfall(),
                       client_fell_behind=self.client_fell_behind(), send_lateness_ms=self.lateness_ms(),
                       client_kept_up=self.client_kept_up())
            if self.rate_note():
                out["note"] = self.rate_note()
        out["client_cpu_s"] = self.client_cpu_s
        out["client_cpu_us_per_request"] = self.client_cpu_s / self.n * 1e6 if self.n else math.nan
        if self.server is not None:
            out["server"] = self.server.summary()
            out["split_ms"] = self.split_ms()
        if self.metrics is not None:
            out["metrics"] = self.metrics
        return json_ready(out, digits=4)

    def describe(self) -> str:
        """The report as a learner reads it (Chinese, a few lines; a client that fell behind first)."""
        lat = self.latency_ms()
        lines = [self.rate_note()] if self.rate_note() else []
        if self.mode == "open":
            head = (f"开环负载：要求 {_fmt_rate(self.requested_rate_rps())} 请求/秒，"
                    f"实际发出 {_fmt_rate(self.sent_rate_rps())} 请求/秒")
        else:
            head = f"闭环负载：并发 {self.concurrency}"
        lines.append(f"{self.label or self.model}（{self.protocol}）{head}；{self.n_ok}/{self.n} 个成功，"
                     f"吞吐 {self.throughput_rps:.1f} 请求/秒")
        lines.append(f"延迟 p50 {lat['p50']:.2f} ms，p95 {lat['p95']:.2f} ms，p99 {lat['p99']:.2f} ms"
                     + (f"；平均批大小 {self.mean_batch_size():.2f}" if self.server else ""))
        if self.n_errors:
            lines.append(f"失败 {self.n_errors} 个（其中被拒绝 {self.n_rejected} 个）：{self.records.errors()}")
        return "\n".join(lines)

    __str__ = describe

    def __repr__(self) -> str:
        lat = self.latency_ms()
        extra = f", mean batch {self.mean_batch_size():.1f}" if self.server else ""
        behind = (f", CLIENT FELL BEHIND: sent {self.sent_rate_rps():.1f} of {self.scheduled_rate_rps():.1f} req/s"
                  if self.client_fell_behind() else "")
        return (f"<LoadReport {self.label or self.model} {self.mode}/{self.protocol}: {self.n_ok}/{self.n} ok, "
                f"{self.throughput_rps:.1f} req/s, p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms{extra}{behind}>")


def _span_rate(times: np.ndarray) -> float:
    """(n - 1) gaps / (last - first) of the finite `times`; NaN if undefined."""
    t = times[np.isfinite(times)]
    span = float(t.max() - t.min()) if t.size > 1 else 0.0
    return (t.size - 1) / span if span > 0 else math.nan


def _fmt_rate(r: float | None) -> str:
    """A rate for a sentence: 1 decimal below 100 req/s, whole numbers above."""
    if r is None or not math.isfinite(r):
        return "?"
    return f"{r:.1f}" if r < 100 else f"{r:.0f}"


def pool_reports(reports: "list[LoadReport]", label: str = "") -> LoadReport:
    """Several runs of one configuration pooled: records end to end, walls, client CPU and server
    statistics summed."""
    if not reports:
        raise ValueError("no reports to pool")
    first = reports[0]
    if any((r.model, r.mode, r.protocol) != (first.model, first.mode, first.protocol) for r in reports):
        raise ValueError("pool only runs of the same model, mode and protocol")
    offsets = list(itertools.accumulate((r.wall_s for r in reports[:-1]), initial=0.0))
    servers = [r.server for r in reports]
    server = sum(servers[1:], servers[0]) if all(s is not None for s in servers) else None
    return LoadReport(model=first.model, mode=first.mode, protocol=first.protocol,
                      records=Records.concat([r.records for r in reports], offsets),
                      wall_s=sum(r.wall_s for r in reports), client_cpu_s=sum(r.client_cpu_s for r in reports),
                      concurrency=first.concurrency, offered_rate=first.offered_rate, server=server,
                      label=label or first.label, unit=first.unit)
