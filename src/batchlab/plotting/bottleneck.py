"""Chapter 01, the anatomy of one request's latency: stacked T_queue / T_prefill / T_decode /
T_overhead bars, the token staircase of a streamed generation, what one decode step costs."""

from typing import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes

from batchlab.plotting.fonts import zh
from batchlab.plotting.layout import legend

PART_STYLE = {
    "queue": ("#e74c3c", ("排队 T_queue", "queue T_queue")),
    "prefill": ("#f5b041", ("预填充 T_prefill", "prefill T_prefill")),
    "decode": ("#5dade2", ("解码 T_decode", "decode T_decode")),
    "overhead": ("#aab7b8", ("开销 T_overhead", "overhead T_overhead")),
}


def stacked_latency(ax: Axes, labels: Sequence[str], rows: Sequence[Mapping[str, float]],
                    totals: Sequence[float] | None = None, hatches: Sequence[str | None] | None = None) -> None:
    """One bar per row (ms) stacking the four parts of `PART_STYLE` (a missing part counts 0);
    ``totals`` (e.g. the client's measured T_total) as markers."""
    if len(labels) != len(rows):
        raise ValueError("labels and rows must have the same length")
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for p, (color, (cn, en)) in PART_STYLE.items():
        h = np.array([max(float(r.get(p, 0.0) or 0.0), 0.0) for r in rows])
        bars = ax.bar(x, h, bottom=bottom, color=color, label=zh(cn, en), width=0.65, edgecolor="white")
        for bar, hatch in zip(bars, hatches or ()):
            bar.set_hatch(hatch)
        bottom += h
    if totals is not None:
        ax.plot(x, totals, "k_", markersize=28, markeredgewidth=2,
                label=zh("客户端实测 T_total", "client-measured T_total"))
    ax.set_xticks(x, labels, fontsize=8)
    ax.set(xlim=(-0.6, len(rows) - 0.4), ylabel=zh("每请求平均耗时 (ms)", "mean time per request (ms)"))
    legend(ax, fontsize=8, markerscale=0.4)


def token_staircase(ax: Axes, token_times_ms: Sequence[float], label: str | None = None, color: str = "C0") -> None:
    """Token index against its arrival time at the client: one step per token (decode is serial)."""
    t = np.asarray(token_times_ms, float)
    if t.ndim != 1 or t.size == 0:
        raise ValueError("token_times_ms must be a non-empty 1-D sequence")
    k = np.arange(1, t.size + 1)
    ax.step(np.concatenate([[0.0], t]), np.concatenate([[0], k]), where="post", color=color,
            label=label or zh("收到的 token 数", "tokens received"))
    ax.plot(t, k, ".", color=color, markersize=4)
    ax.set(xlabel=zh("自发出请求起的时间 (ms)", "time since the request was sent (ms)"),
           ylabel=zh("已收到的 token 数", "tokens received"), xlim=(0, None), ylim=(0, None))


def step_cost(ax: Axes, sizes: Sequence[int], step_ms: Sequence[float]) -> None:
    """One decode step of B sequences (bars) and its cost per sequence t_step/B (line, right axis)."""
    x, s = np.asarray(sizes, float), np.asarray(step_ms, float)
    pos = np.arange(x.size)
    ax.bar(pos, s, color="#5dade2", width=0.6, label=zh("一步 t_step(B)", "one step t_step(B)"))
    ax.set_xticks(pos, [f"B={int(b)}" for b in x])
    ax.set_ylabel(zh("一次解码步耗时 (ms)", "one decode step (ms)"))
    ax2 = ax.twinx()
    ax2.plot(pos, s / x, "o-", color="C3", label=zh("每条序列分摊 t_step/B", "per sequence t_step/B"))
    ax2.set_ylabel(zh("每条序列每个 token (ms)", "per sequence per token (ms)"), color="C3")
    ax2.set_ylim(0, None)
    ax2.grid(False)
    legend(ax, fontsize=8, axes=[ax2], outside="below", ncol=2)
