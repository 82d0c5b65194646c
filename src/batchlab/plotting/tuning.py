"""Figures of chapter 04: waits against load, heatmaps over batcher settings, capacity under an
SLO. Each draws on `ax` (a new figure when None) and returns it."""

from typing import Any, Mapping, Sequence

import matplotlib
import matplotlib.colors as mcolors
import numpy as np
from matplotlib.patches import Rectangle

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
           ylabel=ylabel or zh("平均排队时间（ms）", "mean wait (ms)"))
    legend(ax, fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def plot_heatmap(xs: Sequence[Any], ys: Sequence[Any], z: np.ndarray, title: str, ax: Any = None,
                 fmt: str = "{:.0f}", cmap: str = "viridis", log: bool = False, vmax: float | None = None,
                 mark: tuple[Any, Any] | None = None, xlabel: str | None = None,
                 ylabel: str | None = None) -> Any:
    """A labelled heatmap of ``z[y, x]`` (NaN cells grey); ``mark`` = (x, y) outlines one cell."""
    ax = new_axes(ax, (5.6, 3.8))
    data = np.ma.masked_invalid(np.asarray(z, dtype=float))
    pos = data[data > 0]
    norm = mcolors.LogNorm(vmin=float(pos.min()) if pos.size else 1.0, vmax=vmax or float(data.max())) if log else None
    im = ax.imshow(data, origin="lower", aspect="auto", cmap=matplotlib.colormaps[cmap].with_extremes(bad="#dddddd"),
                   norm=norm, vmax=None if log else vmax)
    for (i, j), v in np.ndenumerate(np.asarray(z, dtype=float)):
        if np.isfinite(v):
            txt = fmt.format(v) if (vmax is None or v <= vmax) else f">{fmt.format(vmax)}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7,
                    color="white" if im.norm(min(v, vmax or v)) < 0.5 else "black")
    ax.set_xticks(range(len(xs)), [f"{x / 1000:g}" if isinstance(x, float) else str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set(xlabel=xlabel or zh("max_queue_delay（ms）", "max_queue_delay (ms)"), ylabel=ylabel or "max_batch_size")
    ax.set_title(title, fontsize=10)
    ax.grid(False)
    if mark is not None:
        j, i = list(xs).index(mark[0]), list(ys).index(mark[1])
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="red", lw=2))
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_slo_capacity(labels: Sequence[str], rates: Sequence[float], best: int = 0, ax: Any = None,
                      measured: Mapping[int, float] | None = None, tie: float | None = None,
                      title: str | None = None) -> Any:
    """Horizontal bars: the highest rate meeting the SLO per config (`best` in red), with measured
    throughputs as diamonds at their bar. With `tie` (a fraction, e.g. 0.02), the other bars within
    `tie` of the highest rate are drawn in orange: a search cannot tell them apart, so `best` is the
    simplest of them, not necessarily the longest bar."""
    ax = new_axes(ax, (7.0, 0.2 * len(labels) + 1.2))
    y = np.arange(len(labels))
    top = max(rates) if len(rates) else 0.0
    tied = {i for i, r in enumerate(rates) if tie is not None and i != best and r >= top * (1 - tie)}
    if tie is None:
        ax.barh(y, rates, color=["#d9534f" if i == best else "C0" for i in range(len(labels))])
    else:
        pct = f"{100 * tie:g}%"
        groups = [([best], "#d9534f", zh(f"所选：相差 {pct} 以内最简单的配置", f"chosen: simplest within {pct}")),
                  (sorted(tied), "#f0ad4e", zh(f"与最高值相差 {pct} 以内（分不出高下）", f"within {pct} of the highest (a tie)")),
                  ([i for i in range(len(labels)) if i != best and i not in tied], "C0", zh("其余配置", "other configs"))]
        for idx, color, label in groups:
            if idx:
                ax.barh(y[idx], np.asarray(rates, dtype=float)[idx], color=color, label=label)
    for i, r in enumerate(rates):
        ax.annotate(f" {r:.0f}", (r, i), va="center", fontsize=7)
    for i, v in (measured or {}).items():
        ax.plot([v], [i], "kD", ms=6, label=zh("实测", "measured") if i == min(measured) else None)
    if tie is not None:
        legend(ax, fontsize=8, outside="below")
    elif measured:
        legend(ax, fontsize=8)
    ax.set_yticks(y, list(labels), fontsize=7)
    ax.invert_yaxis()
    ax.set(xlim=(0, max([*rates, *(measured or {}).values(), 1.0]) * 1.12),   # the value labels stay inside
           xlabel=zh("满足 SLO 的最高到达率（req/s）", "highest rate within the SLO (req/s)"))
    if title:
        ax.set_title(title)
    ax.grid(axis="y", visible=False)
    return ax
