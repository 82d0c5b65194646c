"""Figures of chapter 03: padding efficiency η, padded versus continuous batches, KV cache sizes.
Each draws on `ax` (a new figure when None) and returns it."""

from typing import Any, Mapping, Sequence

import numpy as np

from batchlab.plotting.fonts import new_axes, zh
from batchlab.plotting.layout import legend


def plot_padded_batch(lengths: Sequence[int], ax: Any = None, title: str | None = None) -> Any:
    """One static batch as a pot: each row a request, its real tokens filled, padding hatched."""
    ax = new_axes(ax, (7.0, 0.45 * len(lengths) + 1.4))
    L = np.asarray(lengths, dtype=float)
    y, lmax = np.arange(L.size), float(L.max())
    ax.barh(y, L, color="#d9534f", label=zh("真实 token", "real tokens"))
    ax.barh(y, lmax - L, left=L, color="white", edgecolor="#999999", hatch="///", label=zh("补齐（padding）", "padding"))
    eta = L.sum() / (L.size * lmax)
    ax.set_yticks(y, [f"#{i + 1}  L={int(v)}" for i, v in enumerate(L)])
    ax.invert_yaxis()
    ax.set(xlabel=zh("解码步（token）", "decode steps (tokens)"),
           title=title or zh(f"一锅 {L.size} 份：η = {eta:.3f}", f"one batch of {L.size}: η = {eta:.3f}"))
    legend(ax, fontsize=8, outside="right")
    ax.grid(axis="y", visible=False)
    return ax


def plot_kv_per_token(names: Sequence[str], bytes_per_token: Sequence[float], ax: Any = None,
                      title: str | None = None) -> Any:
    """KV-cache bytes per token of several models, log scale, labelled in KiB / MiB (`title` on top)."""
    ax = new_axes(ax, (7.0, 0.6 * len(names) + 1.4))
    v = np.asarray(bytes_per_token, dtype=float)
    y = np.arange(len(names))
    ax.barh(y, v, color="C2")
    for yi, val in zip(y, v):
        txt = f"{val / 2**10:.0f} KiB" + (f" = {val / 2**20:g} MiB" if val >= 2**19 else "")
        ax.annotate(f" {int(val):,} B = {txt}", (val, yi), va="center", fontsize=8)
    ax.set_yticks(y, list(names))
    ax.invert_yaxis()
    ax.set(xscale="log", xlim=(v.min() / 2, v.max() * 15), xlabel=zh("每 token 的 KV 字节数（对数轴）", "KV bytes per token (log)"),
           title=title)
    ax.grid(axis="y", visible=False)
    return ax


def plot_concurrency_vs_context(contexts: Sequence[int], sequences: Mapping[str, Sequence[int]],
                                ax: Any = None, context_len: Mapping[str, int] | None = None) -> Any:
    """How many sequences fit in a KV budget as the tokens per sequence grow (log-log). With
    `context_len` (model -> its trained context), points past a model's context are drawn hollow
    on a dashed line: hypothetical rows, as the table marks them with *."""
    ax = new_axes(ax)
    limits = context_len or {}
    for i, (label, counts) in enumerate(sequences.items()):
        x, y = np.asarray(contexts, dtype=float), np.asarray(counts, dtype=float)
        inside = x <= limits.get(label, np.inf)
        ax.plot(x[inside], y[inside], "o-", color=f"C{i}", label=label, ms=4)
        if not inside.all():
            first = max(int(inside.sum()) - 1, 0)   # the dashed part starts at the last real point
            ax.plot(x[first:], y[first:], "o--", color=f"C{i}", ms=4, mfc="white", zorder=1)
    if limits and any(np.asarray(contexts) > min(limits.get(m, np.inf) for m in sequences)):
        ax.plot([], [], "o--", color="#666666", ms=4, mfc="white",
                label=zh("超出模型的上下文长度（假设）", "beyond the model's context (hypothetical)"))
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel=zh("每条序列的 token 数（提示 + 输出）", "tokens per sequence"),
           ylabel=zh("可并发的序列数", "concurrent sequences"),
           title=zh("序列越长，一张卡能同时放的序列越少", "longer sequences, fewer concurrent ones"))
    legend(ax, fontsize=8)
    return ax


def plot_kv_layouts(held: Sequence[int], slots: Mapping[str, Sequence[int]], labels: Mapping[str, str],
                    ax: Any = None) -> Any:
    """One sequence as it grows: the token slots each KV layout allocates to it (steps) against the
    positions that hold KV (`held`, the diagonal), from `capacity.kv_layouts`."""
    ax = new_axes(ax, (6.4, 3.8))
    x = np.asarray(held)
    ax.plot(x, x, color="#333333", lw=1, ls=":", label=zh("存着 KV 的 token", "positions holding KV"))
    for i, (key, label) in enumerate(labels.items()):
        ax.step(x, np.asarray(slots[key]), where="post", color=f"C{i}", lw=3.2 - 0.8 * i, label=label)
    ax.set(xlabel=zh("存着 KV 的 token 数", "positions holding KV"), ylabel=zh("分配的 token 位置", "slots allocated"),
           title=zh("同一条序列：按需的块池只多占不到一块", "one sequence: the paged pool allocates under a block more"),
           ylim=(0, None))
    legend(ax, fontsize=8)
    return ax
