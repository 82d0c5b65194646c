"""Figures of chapter 07 (AI 应用场景); they draw what they are given."""

from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure

from batchlab.plotting.fonts import figure, zh
from batchlab.plotting.layout import legend

def plot_ecommerce(rows: Sequence[dict[str, Any]], article: dict[str, float], labels: dict[str, str] | None = None) -> Figure:
    """Two panels over the case-1 scenarios: p95 latency (s) and GPU utilisation (kernel share),
    with the article's before/after figures as dashed lines; each panel's title states its point."""
    names = [(labels or {}).get(r["scenario"], r["scenario"]) for r in rows]
    x = np.arange(len(rows))
    fig, axes = figure(1, 2, figsize=(9.0, 3.6))
    panels = ((axes[0], [r["p95_s"] for r in rows], "C0", zh("p95 延迟 (s)", "p95 latency (s)"), [], 1.15,
               ((article["p95_before_s"], zh("文章：改造前", "article: before")),
                (article["p95_after_s"], zh("文章：改造后", "article: after")))),
              (axes[1], [100 * r["gpu_util"] for r in rows], "C2", zh("GPU 利用率 (%)", "GPU utilisation (%)"), [100.0], 1.1,
               ((100 * article["util_before"], zh("文章：22%", "article: 22%")),
                (100 * article["util_after"], zh("文章：67%", "article: 67%")))))
    for ax, vals, color, ylabel, floor, grow, marks in panels:
        ax.bar(x, vals, color=color)
        for v, name in marks:
            ax.axhline(v, ls="--", color="k", lw=1)
            ax.annotate(name, (len(rows) - 0.5, v), ha="right", va="bottom", fontsize=8)
        ax.set(ylim=(0, max(vals + floor + [v for v, _ in marks]) * grow), ylabel=ylabel)
        ax.set_xticks(x, names, rotation=12, fontsize=8)
    axes[0].set_title(zh("p95：模拟的各场景与原文（虚线）", "p95: scenarios against the article (dashed)"), fontsize=10)
    axes[1].set_title(zh("利用率：同机队不变，缩小机队才升高", "utilisation: flat on the same fleet"), fontsize=10)
    return fig


def plot_fairness(rows: Sequence[dict[str, Any]], labels: dict[str, str] | None = None) -> Figure:
    """p99 latency per tenant and scheduler, grouped bars on a linear axis (each labelled with its value)."""
    scheds = list(dict.fromkeys(r["scheduler"] for r in rows))
    tenants = list(dict.fromkeys(r["tenant"] for r in rows))
    x = np.arange(len(scheds))
    w = 0.8 / len(tenants)
    fig, ax = figure(figsize=(6.4, 3.6))
    for j, t in enumerate(tenants):
        vals = [next(r["p99_s"] for r in rows if r["scheduler"] == s and r["tenant"] == t) for s in scheds]
        bars = ax.bar(x + (j - (len(tenants) - 1) / 2) * w, vals, w, label=t)
        ax.bar_label(bars, [f"{v:.2g}" for v in vals], fontsize=8)
    ax.set_xticks(x, [(labels or {}).get(s, s) for s in scheds])
    ax.set(ylim=(0, max(r["p99_s"] for r in rows) * 1.15), ylabel=zh("p99 延迟 (s)", "p99 latency (s)"),  # labels inside
           title=zh("短单与长单同锅：各租户的 p99", "short and long tenants: p99 each"))
    legend(ax)
    return fig


def plot_utilisation_readings(batch: np.ndarray, ratio: float, ridge: float, article: dict[str, float]) -> Figure:
    """GPU utilisation against mean batch size under two readings: kernel share B/(r+B)
    (host overhead r = a/b) and compute utilisation B/ridge (roofline), with the article's
    22 % and 67 % marked."""
    b = np.asarray(batch, dtype=float)
    fig, ax = figure(figsize=(6.4, 3.6))
    ax.plot(b, 100 * b / (ratio + b), label=zh(f"读法 A：内核时间占比 B/(r+B)，r={ratio:.2f}", f"A: kernel share, r={ratio:.2f}"))
    ax.plot(b, 100 * np.minimum(1, b / ridge), label=zh(f"读法 B：算力利用率 B/{ridge:.0f}", f"B: compute B/{ridge:.0f}"))
    for v in (article["util_before"], article["util_after"]):
        ax.axhline(100 * v, ls="--", color="k", lw=0.8)
    ax.set(xlabel=zh("平均批大小 B", "mean batch size B"), ylabel=zh("GPU 利用率 (%)", "GPU utilisation (%)"),
           xlim=(b.min(), b.max()), ylim=(0, 105))
    legend(ax, fontsize=8)
    return fig
