"""Figures of chapter 06 (工程实战); they draw what they are given."""

from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure

from batchlab.plotting.fonts import figure, zh
from batchlab.plotting.layout import legend

def plot_metrics_timeline(rows: Sequence[dict[str, float]], title: str | None = None) -> Figure:
    """Three stacked panels from `batchlab.load.timeline_rows`: requests/s, queue time per
    request (ms), mean batch size, with pending requests on a twin axis of the last panel."""
    t = np.asarray([r["t"] for r in rows])
    fig, axes = figure(3, 1, figsize=(7.5, 6.2), sharex=True)
    for ax, key, color, ylabel in zip(axes, ("rps", "queue_ms", "mean_batch"), ("C0", "C3", "C2"),
                                      (zh("完成请求/s", "requests/s"), zh("排队 ms/请求", "queue ms/request"),
                                       zh("平均批大小", "mean batch size"))):
        ax.plot(t, [r[key] for r in rows], color=color, marker=".")
        ax.set_ylabel(ylabel)
    tw = axes[2].twinx()
    tw.step(t, [r["pending"] for r in rows], where="post", color="C1", alpha=0.7, label=zh("待处理请求", "pending"))
    tw.set_ylabel(zh("待处理请求数", "pending requests"), color="C1")
    tw.grid(False)
    axes[2].set_xlabel(zh("时间 (s)", "time (s)"))
    fig.suptitle(title or zh("从 /metrics 抓到的拼锅现场", "live from /metrics"))
    return fig


def plot_starvation(runs: Sequence[Any], policies: Sequence[str] = ("priority", "priority_timeout"),
                    labels: dict[str, str] | None = None) -> Figure:
    """Queue wait of each request against its arrival time, one panel per policy, coloured by
    priority; rejected/timed-out requests marked with x at the moment they were dropped."""
    pick = [r for r in runs if r.policy in policies]
    fig, axes = figure(1, len(pick), figsize=(4.2 * len(pick), 3.6), sharey=True, squeeze=False)
    for ax, run in zip(axes[0], pick):
        rec = run.result.records
        dropped = rec["rejected"] | rec["timed_out"]
        for lev, color, name in ((1, "C0", zh("高优先级", "priority 1")), (2, "C3", zh("低优先级", "priority 2"))):
            ok, bad = (run.priority == lev) & ~dropped, (run.priority == lev) & dropped
            ax.scatter(rec["arrival"][ok], (rec["start"][ok] - rec["arrival"][ok]) * 1e3, s=2, color=color,
                       alpha=0.5, label=name)
            if bad.any():
                ax.scatter(rec["arrival"][bad], (rec["finish"][bad] - rec["arrival"][bad]) * 1e3, s=6,
                           marker="x", color="k", alpha=0.4, label=zh("被拒绝", "rejected"))
        ax.set_yscale("symlog", linthresh=10)
        ax.set(xlabel=zh("到达时刻 (s)", "arrival (s)"), title=(labels or {}).get(run.policy, run.policy))
    axes[0][0].set_ylabel(zh("排队等待 (ms)", "queue wait (ms)"))
    legend(axes[0][-1], markerscale=4, fontsize=8)
    return fig


def plot_delay_bound(rows: Sequence[dict[str, Any]]) -> Figure:
    """Queue time p50/p99/max against load, with the configured max_queue_delay as a line."""
    load = [r["load"] for r in rows]
    fig, ax = figure(figsize=(6.5, 3.6))
    for key, name, style in (("queue_p50_ms", "p50", "-o"), ("queue_p99_ms", "p99", "-s"), ("queue_max_ms", zh("最长", "max"), ":^")):
        ax.plot(load, [r[key] for r in rows], style, label=name)
    ax.axhline(rows[0]["delay_ms"], color="k", ls="--", label=zh("排队延时 max_queue_delay", "max_queue_delay"))
    ax.set(yscale="log", xlabel=zh("负载（到达率 / 满批容量）", "load (rate / full-batch capacity)"),
           ylabel=zh("排队时间 (ms)", "queue time (ms)"),
           title=zh("排队延时只管合批等待，不管排队", "the delay does not bound queueing"))
    legend(ax)
    return fig


def plot_kv_plan(rows: Sequence[dict[str, Any]]) -> Figure:
    """Max concurrent sequences against sequence length, one line per model (log-log)."""
    fig, ax = figure(figsize=(6.2, 3.6))
    for model in dict.fromkeys(r["model"] for r in rows):
        sub = [r for r in rows if r["model"] == model]
        ax.plot([r["seq_len"] for r in sub], [r["max_sequences"] for r in sub], "-o", label=model)
        for r in sub:
            ax.annotate(str(r["max_sequences"]), (r["seq_len"], r["max_sequences"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
    ax.set_xscale("log", base=2)
    xs, ys = [r["seq_len"] for r in rows], [r["max_sequences"] for r in rows]
    ax.set(yscale="log", xlabel=zh("每条序列 token 数", "tokens per sequence"), ylabel=zh("最多并发序列", "max concurrent sequences"),
           title=f"{rows[0]['gpu']}: " + zh("KV Cache 决定并发上限", "KV cache sets the concurrency"),
           xlim=(min(xs) / 1.4, max(xs) * 2.0), ylim=(max(min(ys), 1) / 2, max(ys) * 3))   # the counts stay inside
    legend(ax)
    return fig
