"""Figures of chapter 04: waits against load, heatmaps over batcher settings, capacity under an
SLO. Each draws on `ax` (a new figure when None) and returns it."""

from typing import Any, Mapping, Sequence

import matplotlib
import matplotlib.colors as mcolors
import numpy as np

from batchlab.plotting.fonts import new_axes, zh
from batchlab.plotting.layout import legend


def plot_wait_vs_load(x: Sequence[float], curves: Mapping[str, Sequence[float]],
                      points: Mapping[str, Sequence[float]] | None = None, ax: Any = None,
                      xlabel: str | None = None, ylabel: str | None = None, logy: bool = True,
                      title: str | None = None) -> Any:
    """Lines for derived quantities, markers for simulated / measured ones, against load (`title` on top)."""
    ax = new_axes(ax)
    styles = ["-", "--", "-.", ":"]
    for i, (label, y) in enumerate(curves.items()):
        ax.plot(x, y, styles[i % 4], color=f"C{i}", label=label, lw=1.6)
    for j, (label, y) in enumerate((points or {}).items()):
        ax.plot(x, y, "o", color=f"C{j + len(curves)}", ms=5, label=label)
    ax.set(yscale="log" if logy else "linear", xlabel=xlabel or zh("负载 ρ = λ / 容量", "load ρ = λ / capacity"),
           ylabel=ylabel or zh("平均排队时间（ms）", "mean wait (ms)"), title=title)
    legend(ax, fontsize=8)
    return ax


def plot_heatmap(xs: Sequence[Any], ys: Sequence[Any], z: np.ndarray, title: str, ax: Any = None,
                 fmt: str = "{:.0f}", log: bool = False, vmax: float | None = None) -> Any:
    """A labelled heatmap of ``z[y, x]`` over max_queue_delay (µs, shown in ms) and max_batch_size
    (NaN cells grey); with `log`, log colours, and cells above `vmax` read ">vmax"."""
    ax = new_axes(ax, (5.6, 3.8))
    data = np.ma.masked_invalid(np.asarray(z, dtype=float))
    pos = data[data > 0]
    norm = mcolors.LogNorm(vmin=float(pos.min()) if pos.size else 1.0, vmax=vmax or float(data.max())) if log else None
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    im = ax.imshow(data, origin="lower", aspect="auto", cmap=cmap, norm=norm, vmax=None if log else vmax)
    for (i, j), v in np.ndenumerate(np.asarray(z, dtype=float)):
        if np.isfinite(v):
            txt = fmt.format(v) if (vmax is None or v <= vmax) else f">{fmt.format(vmax)}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7,
                    color="white" if im.norm(min(v, vmax or v)) < 0.5 else "black")
    ax.set_xticks(range(len(xs)), [f"{x / 1000:g}" if isinstance(x, float) else str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set(xlabel=zh("max_queue_delay（ms）", "max_queue_delay (ms)"), ylabel="max_batch_size")
    ax.set_title(title, fontsize=10)
    ax.grid(False)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_slo_capacity(labels: Sequence[str], rates: Sequence[float], ax: Any = None, tie: float = 0.02,
                      title: str | None = None) -> Any:
    """Horizontal bars: the highest rate meeting the SLO per config, the first (the chosen one) in
    red. The other bars within `tie` (a fraction) of the highest rate are orange: a search cannot
    tell them apart, so the chosen config is the simplest of them, not necessarily the longest bar."""
    ax = new_axes(ax, (7.0, 0.2 * len(labels) + 1.2))
    y, r = np.arange(len(labels)), np.asarray(rates, dtype=float)
    tied = (np.arange(len(labels)) > 0) & (r >= max(rates, default=0.0) * (1 - tie))
    pct = f"{100 * tie:g}%"
    for idx, color, label in ((y == 0, "#d9534f", zh(f"所选：相差 {pct} 以内最简单的配置", f"chosen: simplest within {pct}")),
                              (tied, "#f0ad4e", zh(f"与最高值相差 {pct} 以内（分不出高下）", f"within {pct} of the highest (a tie)")),
                              ((y > 0) & ~tied, "C0", zh("其余配置", "other configs"))):
        if idx.any():
            ax.barh(y[idx], r[idx], color=color, label=label)
    for i, v in enumerate(rates):
        ax.annotate(f" {v:.0f}", (v, i), va="center", fontsize=7)
    legend(ax, fontsize=8, outside="below")
    ax.set_yticks(y, list(labels), fontsize=7)
    ax.invert_yaxis()
    ax.set(xlim=(0, max([*rates, 1.0]) * 1.12),   # the value labels stay inside
           xlabel=zh("满足 SLO 的最高到达率（req/s）", "highest rate within the SLO (req/s)"), title=title)
    ax.grid(axis="y", visible=False)
    return ax
