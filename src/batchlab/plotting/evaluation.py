"""Figures of chapter 05: percentiles against load, latency against length, Amdahl's ceiling,
batch time. Each draws on `ax` (a new figure when None) and returns it."""

from typing import Any, Mapping, Sequence

import numpy as np

from batchlab.plotting.fonts import new_axes, zh
from batchlab.plotting.layout import legend


def plot_percentiles(x: Sequence[float], pcts: Mapping[str, Sequence[float]], ax: Any = None,
                     style: str = "o-", label_suffix: str = "", xlabel: str | None = None) -> Any:
    """p50 / p95 / p99 (or any named series, log scale) against throughput or load."""
    ax = new_axes(ax)
    for i, (name, y) in enumerate(pcts.items()):
        ax.plot(x, y, style, color=f"C{i}", label=f"{name}{label_suffix}", ms=4)
    ax.set(yscale="log", xlabel=xlabel or zh("吞吐（req/s）", "throughput (req/s)"), ylabel=zh("延迟（ms）", "latency (ms)"))
    legend(ax, fontsize=8, outside="right")  # six series over the whole range: beside the axes, never on a curve
    return ax


def plot_latency_vs_length(lengths: Mapping[str, Sequence[float]], latency: Mapping[str, Sequence[float]],
                           ax: Any = None) -> Any:
    """Each request's latency against its own output length, one colour per scheme."""
    ax = new_axes(ax)
    for i, name in enumerate(latency):
        ax.scatter(lengths[name], latency[name], s=6, alpha=0.35, color=f"C{i}", label=name)
    ax.set(xlabel=zh("请求自己的输出长度（token）", "own output length (tokens)"),
           ylabel=zh("端到端延迟（ms）", "latency (ms)"))
    legend(ax, fontsize=8, markerscale=3, outside="right")
    return ax


def plot_amdahl(batch_sizes: Sequence[float], measured: Sequence[float], f: float, ax: Any = None,
                b_max: float | None = None) -> Any:
    """Measured S(B), the Amdahl fit 1/((1−f) + f/B), the ceiling 1/(1−f) and the ideal S = B."""
    ax = new_axes(ax)
    grid = np.geomspace(1, b_max or float(np.max(batch_sizes)) * 4, 200)
    ax.plot(batch_sizes, measured, "ko", ms=5, label=zh("实测 S(B)", "measured S(B)"))
    ax.plot(grid, 1 / ((1 - f) + f / grid), "-", color="C0", label=zh(f"Amdahl 拟合 f = {f:.3f}", f"Amdahl fit f = {f:.3f}"))
    if f < 1:
        top = 1 / (1 - f)
        ax.axhline(top, color="C3", ls=":", label=zh(f"上限 1/(1−f) = {top:.2f}", f"ceiling 1/(1−f) = {top:.2f}"))
    ax.plot(grid, grid, color="gray", lw=0.8, alpha=0.5, label=zh("理想 S = B", "ideal S = B"))
    ax.set_xscale("log", base=2)
    ax.set(ylim=(0.8, max(1 / (1 - f) * 1.4 if f < 1 else 10, float(np.max(measured)) * 1.3)),
           xlabel=zh("批大小 B", "batch size B"), ylabel=zh("加速比 S", "speedup S"))
    legend(ax, fontsize=8)
    return ax


def plot_batch_time(batch_sizes: Sequence[float], times_ms: Sequence[float], a_ms: float, b_ms: float,
                    ax: Any = None) -> Any:
    """Measured execution time against batch size with the affine fit a + b·B."""
    ax = new_axes(ax)
    ax.plot(batch_sizes, times_ms, "ko", ms=5, label=zh("实测 t(B)", "measured t(B)"))
    grid = np.linspace(0, float(np.max(batch_sizes)), 50)
    ax.plot(grid, a_ms + b_ms * grid, "-", color="C0",
            label=zh(f"拟合 t = {a_ms:.2f} + {b_ms:.3f}·B ms", f"fit t = {a_ms:.2f} + {b_ms:.3f}·B ms"))
    ax.set(xlabel=zh("批大小 B", "batch size B"), ylabel=zh("一次执行耗时（ms）", "execution time (ms)"))
    legend(ax, fontsize=8)
    return ax
