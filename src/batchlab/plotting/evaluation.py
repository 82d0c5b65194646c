"""Figures of chapter 05: percentiles against load, the tail of static batches, Amdahl's ceiling.

Every function draws on a matplotlib ``Axes`` (a new figure when ``ax`` is None) and returns it.
They draw numbers they are given; they never simulate or measure.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from batchlab.plotting.fonts import new_axes, zh
from batchlab.plotting.layout import legend


_ax = new_axes


def plot_percentiles(x: Sequence[float], pcts: Mapping[str, Sequence[float]], ax: Any = None,
                     style: str = "o-", label_suffix: str = "", xlabel: str | None = None,
                     logy: bool = True) -> Any:
    """p50 / p95 / p99 (or any named series) against throughput or load."""
    ax = _ax(ax)
    for i, (name, y) in enumerate(pcts.items()):
        ax.plot(x, y, style, color=f"C{i}", label=f"{name}{label_suffix}", ms=4)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or zh("吞吐（req/s）", "throughput (req/s)"))
    ax.set_ylabel(zh("延迟（ms）", "latency (ms)"))
    legend(ax, fontsize=8)
    return ax


def plot_latency_vs_length(lengths: Mapping[str, Sequence[float]], latency: Mapping[str, Sequence[float]],
                           ax: Any = None, alpha: float = 0.35) -> Any:
    """Each request's latency against its own output length, one colour per scheme."""
    ax = _ax(ax)
    for i, name in enumerate(latency):
        ax.scatter(lengths[name], latency[name], s=6, alpha=alpha, color=f"C{i}", label=name)
    ax.set_xlabel(zh("请求自己的输出长度（token）", "own output length (tokens)"))
    ax.set_ylabel(zh("端到端延迟（ms）", "latency (ms)"))
    legend(ax, fontsize=8, markerscale=3)
    return ax


def plot_amdahl(batch_sizes: Sequence[float], measured: Sequence[float], f: float,
                affine: tuple[float, float] | None = None, ax: Any = None,
                b_max: float | None = None) -> Any:
    """Measured S(B), the fitted Amdahl curve 1/((1−f) + f/B), the affine t(B) = a + bB curve and
    the ceiling 1/(1−f)."""
    ax = _ax(ax)
    b = np.asarray(batch_sizes, dtype=float)
    top = b_max or float(b.max()) * 4
    grid = np.geomspace(1, top, 200)
    ax.plot(b, measured, "ko", ms=5, label=zh("实测 S(B)", "measured S(B)"))
    ax.plot(grid, 1 / ((1 - f) + f / grid), "-", color="C0", label=zh(f"Amdahl 拟合 f = {f:.3f}", f"Amdahl fit f = {f:.3f}"))
    if affine is not None:
        a_, b_ = affine
        ax.plot(grid, grid * (a_ + b_) / (a_ + b_ * grid), "--", color="C1",
                label=zh("仿射 t(B)=a+bB 推出的 S(B)", "S(B) from t(B)=a+bB"))
    if f < 1:
        ax.axhline(1 / (1 - f), color="C3", ls=":", label=zh(f"上限 1/(1−f) = {1 / (1 - f):.2f}",
                                                             f"ceiling 1/(1−f) = {1 / (1 - f):.2f}"))
    ax.plot(grid, grid, color="gray", lw=0.8, alpha=0.5, label=zh("理想 S = B", "ideal S = B"))
    ax.set_xscale("log", base=2)
    ax.set_ylim(0.8, max(1 / (1 - f) * 1.4 if f < 1 else 10, float(np.max(measured)) * 1.3))
    ax.set_xlabel(zh("批大小 B", "batch size B"))
    ax.set_ylabel(zh("加速比 S", "speedup S"))
    legend(ax, fontsize=8)
    return ax


def plot_batch_time(batch_sizes: Sequence[float], times_ms: Sequence[float], a_ms: float, b_ms: float,
                    ax: Any = None) -> Any:
    """Measured execution time against batch size with the affine fit a + b·B."""
    ax = _ax(ax)
    x = np.asarray(batch_sizes, dtype=float)
    ax.plot(x, times_ms, "ko", ms=5, label=zh("实测 t(B)", "measured t(B)"))
    grid = np.linspace(0, x.max(), 50)
    ax.plot(grid, a_ms + b_ms * grid, "-", color="C0",
            label=zh(f"拟合 t = {a_ms:.2f} + {b_ms:.3f}·B ms", f"fit t = {a_ms:.2f} + {b_ms:.3f}·B ms"))
    ax.set_xlabel(zh("批大小 B", "batch size B"))
    ax.set_ylabel(zh("一次执行耗时（ms）", "execution time (ms)"))
    legend(ax, fontsize=8)
    return ax
