"""Chapter 02: batch time t(B), its affine fit, and the speedup S(B) = B·t(1)/t(B) (the formulas
come from `batchlab.theory.formulas`)."""

from typing import Sequence

import numpy as np
from matplotlib.axes import Axes

from batchlab.plotting.fonts import zh
from batchlab.plotting.layout import legend
from batchlab.theory.formulas import affine_batch_time, affine_speedup


def plot_batch_times(ax: Axes, sizes: Sequence[int], times_ms: Sequence[float], a: float, b: float,
                     lo: Sequence[float] | None = None, hi: Sequence[float] | None = None,
                     label: str | None = None, color: str = "C0") -> None:
    """Measured t(B) (points, optional lo–hi range) and the fitted line t(B) = a + b·B (ms)."""
    x, y = np.asarray(sizes, float), np.asarray(times_ms, float)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("sizes and times_ms must be non-empty and of equal length")
    if lo is not None and hi is not None:
        ax.vlines(x, lo, hi, color=color, alpha=0.4, linewidth=3)
    ax.plot(x, y, "o", color=color, label=label or zh("实测 t(B)（中位数）", "measured t(B) (median)"))
    xs = np.linspace(0, x.max() * 1.05, 100)
    ax.plot(xs, affine_batch_time(xs, a, b), "--", color=color, alpha=0.8,
            label=zh(f"拟合 t(B) = {a:.2f} + {b:.2f}·B ms", f"fit t(B) = {a:.2f} + {b:.2f}·B ms"))
    ax.plot(xs, affine_batch_time(1.0, a, b) * xs, ":", color="0.5", label=zh("逐个处理 B·t(1)", "one by one B·t(1)"))
    ax.set(xlabel=zh("批大小 B", "batch size B"), ylabel=zh("一次执行耗时 (ms)", "time of one execution (ms)"),
           xlim=(0, x.max() * 1.05), ylim=(0, None))
    legend(ax, fontsize=8)


def plot_speedup(ax: Axes, sizes: Sequence[int], a: float, b: float, measured: Sequence[float] | None = None) -> None:
    """Derived S(B) = B(a + b)/(a + bB) with its ceiling (a + b)/b, the ideal S = B, and measured points."""
    x = np.asarray(sizes, float)
    top = float(x.max())
    xs = np.linspace(1, top, 200)
    ax.plot(xs, affine_speedup(xs, a, b), color="C1", label=zh("推导 S(B) = B(a+b)/(a+bB)", "derived S(B)"))
    ceiling = (a + b) / b if b > 0 else np.inf
    if np.isfinite(ceiling):
        ax.axhline(ceiling, color="C1", linestyle="--", linewidth=0.9,
                   label=zh(f"直线的极限 (a+b)/b = {ceiling:.2f}", f"the line's limit (a+b)/b = {ceiling:.2f}"))
    ax.plot(xs, xs, ":", color="0.5", label=zh("理想 S = B（批处理完全免费）", "ideal S = B"))
    if measured is not None:
        ax.plot(x, measured, "o", color="C0", label=zh("实测 B·t(1)/t(B)", "measured"))
    pad = 0.04 * (top - 1) if top > 1 else 0.5          # room for the end points' markers
    lim = ceiling * 1.3 if np.isfinite(ceiling) else top
    seen = np.asarray(measured if measured is not None else [], float)
    ax.set(xlabel=zh("批大小 B", "batch size B"), ylabel=zh("加速比 S", "speedup S"), xlim=(1 - pad, top + pad),
           ylim=(0, max([min(top, max(lim, 2.0)), *seen[np.isfinite(seen)]]) * 1.08))
    legend(ax, fontsize=8)


def plot_hotpot_example(ax: Axes, t_single: float = 10.0, b_batch: int = 3, t_batch: float = 18.0,
                        max_b: int = 12) -> None:
    """The article's kitchen: t(1) = 10 min, t(3) = 18 min, the line through them and S(B)."""
    b = (t_batch - t_single) / (b_batch - 1)
    xs = np.arange(1, max_b + 1)
    ax.bar(xs, affine_batch_time(xs, t_single - b, b) / xs, color="C0", alpha=0.7,
           label=zh("每份平均用时 t(B)/B（分钟）", "minutes per dish t(B)/B"))
    ax.axhline(b, color="C0", linestyle="--", linewidth=0.9, label=zh(f"下限 b = {b:g} 分钟", f"floor b = {b:g} min"))
    ax.set(xlabel=zh("一锅几份 B", "dishes per pot B"), ylabel=zh("分钟 / 份", "minutes per dish"), xticks=xs)
    legend(ax, fontsize=8)
