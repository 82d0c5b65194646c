"""Figures of chapter 07 (AI 应用场景); they draw what they are given."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from batchlab.plotting.fonts import figure, zh
from batchlab.plotting.layout import legend

__all__ = ["plot_ecommerce", "plot_fairness", "plot_utilisation_readings"]


def plot_ecommerce(rows: Sequence[dict[str, Any]], article: dict[str, float], labels: dict[str, str] | None = None):
    """Two panels over the case-1 scenarios: P95 latency (s) and GPU utilisation (kernel share),
    with the article's before/after figures as dashed lines."""
    names = [(labels or {}).get(r["scenario"], r["scenario"]) for r in rows]
    x = np.arange(len(rows))
    fig, axes = figure(1, 2, figsize=(9.0, 3.6))
    axes[0].bar(x, [r["p95_s"] for r in rows], color="C0")
    for v, name in ((article["p95_before_s"], zh("文章：改造前", "article: before")),
                    (article["p95_after_s"], zh("文章：改造后", "article: after"))):
        axes[0].axhline(v, ls="--", color="k", lw=1)
        axes[0].annotate(name, (len(rows) - 0.5, v), ha="right", va="bottom", fontsize=8)
    axes[0].set_ylim(0, max([r["p95_s"] for r in rows] + [article["p95_before_s"], article["p95_after_s"]]) * 1.15)
    axes[0].set_ylabel("P95 (s)")
    axes[1].bar(x, [100 * r["gpu_util"] for r in rows], color="C2")
    for v, name in ((article["util_before"], zh("文章：22%", "article: 22%")),
                    (article["util_after"], zh("文章：67%", "article: 67%"))):
        axes[1].axhline(100 * v, ls="--", color="k", lw=1)
        axes[1].annotate(name, (len(rows) - 0.5, 100 * v), ha="right", va="bottom", fontsize=8)
    axes[1].set_ylim(0, max([100 * r["gpu_util"] for r in rows] + [100 * article["util_after"], 100.0]) * 1.1)
    axes[1].set_ylabel(zh("GPU 利用率 (%)", "GPU utilisation (%)"))
    for ax in axes:
        ax.set_xticks(x, names, rotation=12, fontsize=8)
    return fig


def plot_fairness(rows: Sequence[dict[str, Any]], labels: dict[str, str] | None = None):
    """p99 latency per tenant and scheduler (log scale), grouped bars."""
    scheds = list(dict.fromkeys(r["scheduler"] for r in rows))
    tenants = list(dict.fromkeys(r["tenant"] for r in rows))
    x = np.arange(len(scheds))
    w = 0.8 / len(tenants)
    fig, ax = figure(figsize=(6.4, 3.6))
    for j, t in enumerate(tenants):
        vals = [next(r["p99_s"] for r in rows if r["scheduler"] == s and r["tenant"] == t) for s in scheds]
        bars = ax.bar(x + (j - (len(tenants) - 1) / 2) * w, vals, w, label=t)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.2g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    top = max(r["p99_s"] for r in rows)
    ax.set_ylim(top=top * 2.5)                            # the value labels stay inside
    ax.set_xticks(x, [(labels or {}).get(s, s) for s in scheds])
    ax.set(ylabel=zh("p99 延迟 (s)", "p99 latency (s)"),
           title=zh("短单与长单同锅：各租户的 p99", "short and long tenants: p99 each"))
    legend(ax)
    return fig


def plot_utilisation_readings(batch: np.ndarray, ratio: float, ridge: float, article: dict[str, float]):
    """GPU utilisation against mean batch size under two readings: kernel share B/(r+B)
    (host overhead r = a/b) and compute utilisation B/ridge (roofline), with the article's
    22 % and 67 % marked."""
    b = np.asarray(batch, dtype=float)
    fig, ax = figure(figsize=(6.4, 3.6))
    ax.plot(b, 100 * b / (ratio + b), label=zh(f"读法 A：内核时间占比 B/(r+B)，r={ratio:.2f}", f"A: kernel share, r={ratio:.2f}"))
    ax.plot(b, 100 * np.minimum(1, b / ridge), label=zh(f"读法 B：算力利用率 B/{ridge:.0f}", f"B: compute B/{ridge:.0f}"))
    for v in (article["util_before"], article["util_after"]):
        ax.axhline(100 * v, ls="--", color="k", lw=0.8)
    ax.set(xlabel=zh("平均批大小 B", "mean batch size B"), ylabel=zh("GPU 利用率 (%)", "GPU utilisation (%)"))
    ax.set_xlim(b.min(), b.max())
    ax.set_ylim(0, 105)
    legend(ax, fontsize=8)
    return fig
