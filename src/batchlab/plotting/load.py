"""Plots of measured load runs (`batchlab.load.LoadReport`). They draw; they never measure.

Each helper takes reports (or one report) and an optional matplotlib Axes, and returns the Axes.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np

from batchlab.plotting import fonts


def _setup() -> Any:
    try:
        fonts.setup()
        return fonts.zh
    except Exception:  # noqa: BLE001 - fonts are a nicety; English labels always work
        return lambda cn, en: en


def _axes(ax: Any) -> Any:
    if ax is not None:
        return ax
    return plt.subplots()[1]


def _label(r: Any) -> str:
    return r.label or r.model


def _reports(reports: Any) -> list[Any]:
    items = [reports] if hasattr(reports, "records") else list(reports)
    if not items:
        raise ValueError("no reports to plot")
    for r in items:
        if not hasattr(r, "records"):
            raise ValueError(f"expected LoadReport objects, got {type(r).__name__}")
    return items


def plot_latency_cdf(reports: Any, ax: Any = None, what: str = "latency", log: bool = False) -> Any:
    """Empirical CDF of client latency (or 'ttft' / 'tpot') per report, p50/p99 marked."""
    zh = _setup()
    ax = _axes(ax)
    if what not in ("latency", "ttft", "tpot"):
        raise ValueError(f"what must be 'latency', 'ttft' or 'tpot', not {what!r}")
    for r in _reports(reports):
        x = getattr(r.records, what) * 1e3
        x = np.sort(x[np.isfinite(x)])
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        line, = ax.step(x, y, where="post", label=_label(r))
        for q in (50, 99):
            v = np.percentile(x, q)
            ax.plot([v], [q / 100], "o", color=line.get_color(), ms=4)
    names = {"latency": zh("延迟", "latency"), "ttft": zh("首 token 时间", "time to first token"),
             "tpot": zh("每 token 延迟", "per-token latency")}
    ax.set_xlabel(f"{names[what]} (ms)")
    ax.set_ylabel(zh("累计比例", "fraction of requests"))
    if log:
        ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize="small")
    return ax


def plot_throughput_vs_concurrency(reports: Sequence[Any], ax: Any = None, percentile: int = 95) -> Any:
    """Throughput (left axis) and p`percentile` latency (right axis) against client concurrency.

    Reports with the same label form one line; their `concurrency` is the x value.
    """
    zh = _setup()
    ax = _axes(ax)
    rs = [r for r in _reports(reports) if r.concurrency]
    if not rs:
        raise ValueError("the reports carry no concurrency (closed-loop runs needed)")
    groups: dict[str, list[Any]] = {}
    for r in rs:
        groups.setdefault(_label(r), []).append(r)
    ax2 = ax.twinx()
    for name, g in groups.items():
        g = sorted(g, key=lambda r: r.concurrency)
        c = [r.concurrency for r in g]
        line, = ax.plot(c, [r.throughput_rps for r in g], "o-", label=name)
        ax2.plot(c, [r.latency_ms()[f"p{percentile}"] for r in g], "s--", color=line.get_color(), alpha=0.6)
    ax.set_xlabel(zh("并发客户端数", "concurrency"))
    ax.set_ylabel(zh("吞吐 (请求/秒)", "throughput (req/s)"))
    ax2.set_ylabel(zh(f"p{percentile} 延迟 (ms，虚线)", f"p{percentile} latency (ms, dashed)"))
    ax2.grid(False)
    ax.legend(fontsize="small", loc="upper left")
    return ax


_SPLIT = (("queue", "排队", "queue"), ("compute", "计算", "compute"),
          ("server_other", "服务器其他", "server other"), ("overhead", "客户端与网络开销", "client + network"))


def plot_split(reports: Any, ax: Any = None) -> Any:
    """Stacked bars of the mean latency split: queue, compute, server other, overhead (ms)."""
    zh = _setup()
    ax = _axes(ax)
    rs = _reports(reports)
    splits = [r.split_ms() for r in rs]
    x = np.arange(len(rs))
    bottom = np.zeros(len(rs))
    for key, cn, en in _SPLIT:
        vals = np.array([max(s.get(key, math.nan), 0.0) if math.isfinite(s.get(key, math.nan)) else 0.0 for s in splits])
        ax.bar(x, vals, bottom=bottom, label=zh(cn, en))
        bottom += vals
    for xi, s in zip(x, splits):
        if math.isfinite(s["total"]):
            ax.text(xi, s["total"], f"{s['total']:.1f}", ha="center", va="bottom", fontsize="small")
    ax.set_xticks(x, [_label(r) for r in rs])
    ax.set_ylabel(zh("平均延迟 (ms)", "mean latency (ms)"))
    ax.set_title(zh("T_total 拆分：排队 + 计算 + 开销", "T_total split: queue + compute + overhead"))
    ax.legend(fontsize="small")
    return ax


def plot_batch_histogram(report: Any, ax: Any = None, weight: str = "requests") -> Any:
    """The server's executed batch sizes (from `batch_stats`).

    `weight`='batches' counts executions; 'requests' counts requests served in each size.
    """
    zh = _setup()
    ax = _axes(ax)
    if weight not in ("batches", "requests"):
        raise ValueError(f"weight must be 'batches' or 'requests', not {weight!r}")
    hist = report.batch_histogram()
    if not hist:
        raise ValueError("the report has no server statistics (run with stats=True)")
    sizes = np.array(sorted(hist))
    counts = np.array([hist[s] for s in sizes], dtype=float)
    if weight == "requests":
        counts = counts * sizes
    ax.bar(sizes, counts, width=0.8)
    mean = report.mean_batch_size()
    ax.axvline(mean, color="k", ls="--", lw=1)
    ax.text(mean, ax.get_ylim()[1] * 0.95, zh(f" 平均 {mean:.1f}", f" mean {mean:.1f}"), va="top")
    ax.set_xlabel(zh("批大小", "batch size"))
    ax.set_ylabel(zh("执行次数", "executions") if weight == "batches" else zh("请求数", "requests"))
    ax.set_title(_label(report))
    return ax


def plot_latency_over_time(report: Any, ax: Any = None) -> Any:
    """Each request's latency against its send time; failed requests marked on the axis."""
    zh = _setup()
    ax = _axes(ax)
    rec = report.records
    ok = rec.ok
    ax.plot(rec.sent[ok], rec.latency[ok] * 1e3, ".", ms=2, alpha=0.5, label=zh("成功", "answered"))
    if (~ok).any():
        ax.plot(rec.sent[~ok], np.zeros((~ok).sum()), "x", color="C3", ms=4, label=zh("失败/拒绝", "failed / rejected"))
    ax.set_xlabel(zh("发送时间 (s)", "send time (s)"))
    ax.set_ylabel(zh("延迟 (ms)", "latency (ms)"))
    ax.set_title(_label(report))
    ax.legend(fontsize="small")
    return ax
