"""Matplotlib drawings of animation frames (`batchlab.viz.frames`): one lane per row (queue ·
time window · pot), utilisation over time, still frames side by side for headless runs."""

import io
from typing import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from batchlab.plotting import setup, zh
from batchlab.plotting.layout import legend
from batchlab.viz.frames import Frame, Lane, frame_at, utilization_series

QUEUE_SHOWN = 10  # waiting requests drawn; the rest are counted

_LANE_COLORS = ("#c0392b", "#2471a3", "#1e8449")


_PAD_FACE, _PAD_EDGE = "0.55", "0.2"   # a finished request still holding its slot (padding waste)


def _request_color(rid: int) -> tuple:
    """A request's colour: tab20 without its two greys, so no request looks like a padding slot."""
    k = int(rid) % 18
    return matplotlib.colormaps["tab20"](k + 2 if k >= 14 else k)


def draw_lane(ax: Axes, lane: Lane, frame: Frame, title: bool = True, fontscale: float = 1.0) -> None:
    """Draw ``frame`` of ``lane`` on ``ax``: the queue (left), the window bar, the pot, its counts (right);
    ``fontscale`` enlarges every label (the still frames are drawn smaller than the animation)."""
    m, q, fs = lane.slots, QUEUE_SHOWN, fontscale
    ax.set(xlim=(-q - 1.6, m + 5.2), ylim=(-0.22, 1.35))   # room for the window label
    ax.set_axis_off()
    if title:
        ax.text(-q - 1.5, 1.24, lane.name, fontsize=10 * min(fs, 1.15), va="center")
    cmap, scale = matplotlib.colormaps["YlOrRd"], lane.delay_s if lane.delay_s > 0 else 1.0
    for k, age in enumerate(frame.queue_age[:q]):   # the queue, oldest next to the pot, redder with age
        ax.add_patch(Rectangle((-1.05 - k, 0.3), 0.85, 0.4, facecolor=cmap(0.15 + 0.8 * min(1.0, age / scale)),
                               edgecolor="0.3", linewidth=0.6))
    if frame.queue_len > q:
        ax.text(-q - 1.45, 0.5, f"+{frame.queue_len - q}", fontsize=8 * fs, va="center")
    ax.text(-q / 2 - 0.6, 0.82, zh(f"排队 {frame.queue_len}", f"queue {frame.queue_len}"), fontsize=8 * fs, ha="center",
            color="0.25")
    if lane.delay_s > 0:   # the oldest waiting request's time window
        w = frame.window or 0.0
        ax.add_patch(Rectangle((-q - 0.2, 0.08), q - 0.1, 0.1, facecolor="none", edgecolor="0.5", linewidth=0.6))
        ax.add_patch(Rectangle((-0.3 - w * (q - 0.1), 0.08), w * (q - 0.1), 0.1, facecolor="#e67e22", edgecolor="none"))
        ax.text(-q - 0.2, -0.02, zh(f"时间窗口 {lane.delay_s * 1e3:.0f} ms", f"window {lane.delay_s * 1e3:.0f} ms"),
                fontsize=7 * fs, va="top", color="0.35")
    # the pot: m slots
    ax.add_patch(Rectangle((0, 0.2), m, 0.7, facecolor="#fbf3e4", edgecolor="0.2", linewidth=1.2))
    for s in range(1, m):
        ax.plot([s, s], [0.2, 0.9], color="0.75", linewidth=0.5)
    for s, (rid, p, pad) in enumerate(zip(frame.gpu_ids[:m], frame.gpu_progress[:m], frame.gpu_padding[:m])):
        if pad:
            ax.add_patch(Rectangle((s + 0.08, 0.22), 0.84, 0.66, facecolor=_PAD_FACE, edgecolor=_PAD_EDGE,
                                   hatch="////", linewidth=0.6))
        else:
            c = _request_color(rid)
            ax.add_patch(Rectangle((s + 0.08, 0.22), 0.84, 0.66 * max(p, 0.02), facecolor=c, edgecolor="none"))
            ax.add_patch(Rectangle((s + 0.08, 0.22), 0.84, 0.66, facecolor="none", edgecolor=c, linewidth=0.8))
    ax.text(m / 2, 1.0, zh(f"锅里 {frame.batch_size}/{m}", f"pot {frame.batch_size}/{m}"), fontsize=8 * fs,
            ha="center", color="0.25")
    txt = zh(f"已完成 {frame.done}\n忙碌率 {frame.busy:.0%}\n满锅率 {frame.fill:.0%}",
             f"done {frame.done}\nbusy {frame.busy:.0%}\nfill {frame.fill:.0%}")
    ax.text(m + 0.4, 0.55, txt, fontsize=8 * fs, va="center", linespacing=1.5)


def draw_utilization(ax: Axes, lanes: Sequence[Lane], horizon: float, t: float | None = None,
                     window_s: float | None = None) -> None:
    """Fill (solid) and busy (dashed) of each lane in windows of `window_s` over [0, horizon]; the
    lines reach 100 %, so the legend sits under the axes."""
    w = window_s if window_s else max(horizon / 20.0, 1e-3)
    edges = np.arange(0.0, horizon + w / 2, w) if horizon > w / 2 else np.array([0.0, horizon])
    mid = (edges[:-1] + edges[1:]) / 2
    for i, lane in enumerate(lanes):
        busy, fill = utilization_series(lane, edges)
        c = _LANE_COLORS[i % len(_LANE_COLORS)]
        ax.plot(mid, fill * 100, color=c, linewidth=1.8, label=zh(f"{lane.name} 满锅率", f"{lane.name} fill"))
        ax.plot(mid, busy * 100, color=c, linewidth=1.0, linestyle="--", alpha=0.7)
    if t is not None:
        ax.axvline(t, color="0.3", linewidth=0.8)
    ax.set(xlim=(0, horizon), ylim=(0, 105), xlabel=zh("时间 (s)", "time (s)"), ylabel=zh("利用率 (%)", "utilisation (%)"))
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="0.35", linewidth=1.8), Line2D([], [], color="0.35", linewidth=1.0, linestyle="--")]
    labels += [zh("实线：满锅率", "solid: fill"), zh("虚线：忙碌率", "dashed: busy")]
    legend(ax, handles, labels, fontsize=7, ncol=len(handles), frameon=False, outside="below")


def draw_frame(fig: Figure, lanes: Sequence[Lane], t: float, horizon: float) -> None:
    """The whole picture at time ``t``: one row per lane, then utilisation over time."""
    fig.clear()
    gs = fig.add_gridspec(len(lanes) + 1, 1, height_ratios=[1.0] * len(lanes) + [1.3], hspace=0.25)
    for i, lane in enumerate(lanes):
        draw_lane(fig.add_subplot(gs[i]), lane, frame_at(lane, t))
    draw_utilization(fig.add_subplot(gs[len(lanes)]), lanes, horizon, t)
    fig.suptitle(f"t = {t:.2f} s", fontsize=11, x=0.5, y=0.995)


def new_figure(n_lanes: int = 3) -> Figure:
    """A figure sized for `draw_frame`."""
    setup()
    return plt.figure(figsize=(9.5, 1.35 * n_lanes + 2.2), dpi=90)


def render_png(lanes: Sequence[Lane], t: float, horizon: float, fig: Figure | None = None) -> bytes:
    """PNG bytes of `draw_frame` (for the widget), drawn into `fig` or a new figure closed after."""
    target = fig if fig is not None else new_figure(len(lanes))
    draw_frame(target, lanes, t, horizon)
    buf = io.BytesIO()
    target.savefig(buf, format="png", bbox_inches="tight")
    if fig is None:
        plt.close(target)
    return buf.getvalue()


def film_strip(lanes: Sequence[Lane], times: Sequence[float]) -> Figure:
    """Still frames: one column per instant in `times`, one row per lane."""
    setup()
    times = list(times)
    if not times:
        raise ValueError("film_strip needs at least one time")
    fig, axes = plt.subplots(len(lanes), len(times), figsize=(3.6 * len(times), 1.5 * len(lanes) + 1.0),
                             squeeze=False)
    for j, t in enumerate(times):
        for i, lane in enumerate(lanes):
            draw_lane(axes[i, j], lane, frame_at(lane, t), title=(j == 0), fontscale=1.3)
        axes[0, j].set_title(f"t = {t:.1f} s", fontsize=13)
    cmap = matplotlib.colormaps["YlOrRd"]
    keys = [(dict(facecolor=cmap(0.2), edgecolor="0.3"), zh("排队：刚到", "queued: just arrived")),
            (dict(facecolor=cmap(0.9), edgecolor="0.3"), zh("排队：等得久", "queued: waited long")),
            (dict(facecolor="#e67e22"), zh("时间窗口已用掉的部分", "window used")),
            (dict(facecolor=_request_color(0)), zh("锅里：柱高 = 该请求的进度", "in the pot: progress")),
            (dict(facecolor=_PAD_FACE, edgecolor=_PAD_EDGE, hatch="////"),
             zh("灰色斜线格：已做完、陪跑（padding 浪费）", "done, waiting for the pot (padding)"))]
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.legend([Rectangle((0, 0), 1, 1, **style) for style, _ in keys], [label for _, label in keys],
               loc="lower center", ncol=3, fontsize=11, frameon=False)
    return fig


def plot_utilization_sweep(ax: Axes, rows: Sequence[dict], title: str | None = None) -> None:
    """Fill (solid) of each lane against the arrival rate (`utilization_sweep` / `stateless_sweep`
    rows), the busy share of lane 0 (no batching) dashed, guides at 10 % and 80 %."""
    lanes = sorted({r["lane"] for r in rows})
    for k in lanes:
        rs = [r for r in rows if r["lane"] == k]
        x = [r["rate"] for r in rs]
        c = _LANE_COLORS[k % len(_LANE_COLORS)]
        ax.plot(x, [r["fill"] * 100 for r in rs], "o-", color=c, label=zh(f"{rs[0]['name']} 满锅率", f"lane {k} fill"))
        if k == 0:
            ax.plot(x, [r["busy"] * 100 for r in rs], "--", color=c,
                    label=zh(f"{rs[0]['name']} 忙碌率（nvidia-smi 口径）", f"lane {k} busy"))
    for y in (10, 80):
        ax.axhline(y, color="0.5", linewidth=0.8, linestyle=":")
    ax.set(xlabel=zh("到达率 λ (请求/s)", "arrival rate λ (req/s)"), ylabel=zh("利用率 (%)", "utilisation (%)"),
           ylim=(0, 105))
    ax.set_title(title, fontsize=10)
    legend(ax, fontsize=7, outside="below", ncol=2)
