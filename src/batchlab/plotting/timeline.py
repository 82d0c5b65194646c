"""Request timelines (chapters 00, 02): per request a line from arrival to start and a bar, in its
batch's colour, from start to finish; shaded executions; where the first window expires."""

from typing import Any, Sequence

import matplotlib
import numpy as np
from matplotlib.axes import Axes

from batchlab.plotting.fonts import zh
from batchlab.plotting.layout import legend


def plot_timeline(ax: Axes, arrival: Sequence[float], start: Sequence[float], finish: Sequence[float],
                  batch_id: Sequence[int], b_start: Sequence[float] | None = None,
                  b_end: Sequence[float] | None = None, delay_s: float = 0.0, unit: str = "ms",
                  title: str | None = None) -> None:
    """Draw requests (rows, in arrival order) and executions; times in seconds, shown in ``unit``."""
    scale = {"ms": 1e3, "s": 1.0}.get(unit)
    if scale is None:
        raise ValueError(f"unit must be 'ms' or 's', not {unit!r}")
    a, s, f = (np.asarray(v, float) * scale for v in (arrival, start, finish))
    bid = np.asarray(batch_id, int)
    if not (a.size == s.size == f.size == bid.size):
        raise ValueError("arrival, start, finish and batch_id must have the same length")
    order = np.argsort(a, kind="stable")
    cmap = matplotlib.colormaps["tab10"]
    if b_start is not None and b_end is not None:
        for k, (bs, be) in enumerate(zip(np.asarray(b_start) * scale, np.asarray(b_end) * scale)):
            ax.axvspan(bs, be, color=cmap(k % 10), alpha=0.12, linewidth=0)
    for row, i in enumerate(order):
        ax.plot([a[i], s[i]], [row, row], color="0.55", linewidth=1.0)
        ax.plot([a[i]], [row], "|", color="0.3", markersize=8)
        if np.isfinite(s[i]) and np.isfinite(f[i]):
            ax.plot([s[i], f[i]], [row, row], color=cmap(bid[i] % 10), linewidth=6, solid_capstyle="butt")
    if delay_s > 0:   # the first window opens with the first request
        ax.axvline(a[order[0]] + delay_s * scale, color="#e67e22", linestyle="--", linewidth=1,
                   label=zh(f"最老请求的窗口到期（{delay_s * 1e3:.0f} ms）", f"oldest request's window ({delay_s * 1e3:.0f} ms)"))
        legend(ax, fontsize=8, outside="below")
    ax.set_yticks(range(a.size), [f"#{int(i)}" for i in order], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel=zh(f"时间 ({unit})", f"time ({unit})"), ylabel=zh("请求（按到达顺序）", "request (arrival order)"))
    ax.set_title(title, fontsize=10)


def plot_sim_timeline(ax: Axes, result: Any, title: str | None = None) -> None:
    """`plot_timeline` for a `batchlab.sim.SimResult`: its records, executions and max_queue_delay, in ms."""
    r, b = result.records, result.batches
    delay_s = float(result.config.get("max_queue_delay_us") or 0.0) * 1e-6
    plot_timeline(ax, r["arrival"], r["start"], r["finish"], r["batch_id"], b["start"], b["end"], delay_s, title=title)
