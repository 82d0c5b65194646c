"""Figures of chapter 08 (Python 演示): the article's tick demo (a `seed_demo.Trace`) next to a
`batchlab.sim` result."""

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from batchlab.plotting.fonts import figure, zh
from batchlab.plotting.layout import legend

def trace_occupancy(trace: Any, dt: float = 0.05) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, running, waiting) at every tick of a `seed_demo.Trace`: a request runs from the tick
    that admitted it until its finish time, and waits from its arrival until then."""
    admitted: dict[int, float] = {}
    for tick, rids, _ in trace.admissions:
        for rid in rids:
            admitted.setdefault(rid, tick * dt)
    t = np.arange(1, trace.ticks + 1) * dt
    arr = {rid: at for rid, at, _ in trace.arrivals}
    start = np.asarray([admitted.get(r, np.inf) for r in arr])
    finish = np.asarray([trace.finishes.get(r, np.inf) for r in arr])
    arrival = np.asarray(list(arr.values()))
    eps = dt / 10
    running = ((start[None, :] <= t[:, None] + eps) & (finish[None, :] > t[:, None] + eps)).sum(axis=1)
    waiting = ((arrival[None, :] <= t[:, None] + eps) & (start[None, :] > t[:, None] + eps)).sum(axis=1)
    return t, running, waiting


def sim_occupancy(res: Any, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, running, waiting) of a `SimResult` at `times`: running = in the system and not waiting."""
    t = np.asarray(times, dtype=float)
    waiting = res.queue_length_at(t)
    return t, res.in_system_at(t) - waiting, waiting


def plot_slots(panels: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]], capacity: int,
               t_max: float | None = None) -> Figure:
    """One panel per (title, time, running, waiting): running requests (filled) against the
    batch capacity, and requests waiting in the queue (line)."""
    fig, axes = figure(len(panels), 1, figsize=(7.6, 2.3 * len(panels)), sharex=True, squeeze=False)
    for ax, (title, t, run, wait) in zip(axes[:, 0], panels):
        ax.fill_between(t, run, step="post", alpha=0.45, color="C0", label=zh("锅里（运行中）", "running"))
        ax.step(t, wait, where="post", color="C3", label=zh("门口排队", "waiting"))
        ax.axhline(capacity, color="k", ls="--", lw=0.8, label=zh("锅容量", "batch capacity"))
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(zh("请求数", "requests"))
        if t_max:
            ax.set_xlim(0, t_max)
    legend(axes[0, 0], fontsize=8, outside="right")
    axes[-1, 0].set_xlabel(zh("时间 (s)", "time (s)"))
    return fig
