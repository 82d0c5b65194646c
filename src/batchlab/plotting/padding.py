"""Figures of chapter 03: padding efficiency η, padded versus continuous batches, KV cache sizes.

Every function draws on a matplotlib ``Axes`` (a new figure when ``ax`` is None) and returns it.
They draw numbers they are given; they never simulate or measure.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from batchlab.plotting.fonts import new_axes, zh
from batchlab.plotting.layout import legend


_ax = new_axes


def plot_padded_batch(lengths: Sequence[int], ax: Any = None, title: str | None = None) -> Any:
    """One static batch as a pot: each row a request, its real tokens filled, padding hatched."""
    ax = _ax(ax, (7.0, 0.45 * len(lengths) + 1.4))
    L = np.asarray(lengths, dtype=float)
    lmax = float(L.max())
    y = np.arange(L.size)
    ax.barh(y, L, color="#d9534f", label=zh("真实 token", "real tokens"))
    ax.barh(y, lmax - L, left=L, color="white", edgecolor="#999999", hatch="///",
            label=zh("补齐（padding）", "padding"))
    eta = L.sum() / (L.size * lmax)
    ax.set_yticks(y, [f"#{i + 1}  L={int(v)}" for i, v in enumerate(L)])
    ax.invert_yaxis()
    ax.set_xlabel(zh("解码步（token）", "decode steps (tokens)"))
    ax.set_title(title or zh(f"一锅 {L.size} 份：η = {eta:.3f}", f"one batch of {L.size}: η = {eta:.3f}"))
    legend(ax, fontsize=8, outside="right")
    ax.grid(axis="y", visible=False)
    return ax


def plot_eta_curve(batch_sizes: Sequence[int], exact: Sequence[float], mc_mean: Sequence[float] | None = None,
                   mc_stderr: Sequence[float] | None = None, ratio: Sequence[float] | None = None,
                   limit: float | None = None, ax: Any = None) -> Any:
    """E[η] against batch size: exact curve, Monte Carlo points (±2 s.e.), the ratio of
    expectations E[L]/E[L_max], and the limit E[L]/max L."""
    ax = _ax(ax)
    b = np.asarray(batch_sizes, dtype=float)
    ax.plot(b, exact, "-", color="C0", lw=2, label=zh("E[η] 精确值", "E[η] exact"))
    if ratio is not None:
        ax.plot(b, ratio, "--", color="C1", label=zh("E[L]/E[L_max]（期望之比）", "E[L]/E[L_max] (ratio)"))
    if mc_mean is not None:
        err = None if mc_stderr is None else 2 * np.asarray(mc_stderr)
        ax.errorbar(b, mc_mean, yerr=err, fmt="o", color="C3", ms=4, capsize=3,
                    label=zh("蒙特卡洛（±2 标准误）", "Monte Carlo (±2 s.e.)"))
    if limit is not None:
        ax.axhline(limit, color="gray", ls=":", label=zh(f"B→∞ 极限 {limit:.3f}", f"limit B→∞ {limit:.3f}"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(b, [str(int(x)) for x in b])
    ax.set_xlabel(zh("批大小 B", "batch size B"))
    ax.set_ylabel(zh("有效率 η", "efficiency η"))
    ax.set_ylim(0, 1.05)
    legend(ax, fontsize=8)
    return ax


def plot_scheme_bars(names: Sequence[str], series: Mapping[str, Sequence[float]], ylabel: str,
                     ax: Any = None, fmt: str = "{:.0f}") -> Any:
    """Grouped bars: one group per scheme (e.g. padded / continuous), one bar per series
    (e.g. derived / simulated / measured), each labelled with its value. NaN bars are skipped."""
    ax = _ax(ax)
    k = len(series)
    x = np.arange(len(names))
    w = 0.8 / max(k, 1)
    for i, (label, vals) in enumerate(series.items()):
        v = np.asarray(vals, dtype=float)
        pos = x - 0.4 + w * (i + 0.5)
        ok = ~np.isnan(v)
        bars = ax.bar(pos[ok], v[ok], w, label=label, color=f"C{i}")
        for bar, val in zip(bars, v[ok]):
            ax.annotate(fmt.format(val), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, list(names))
    ax.set_ylabel(ylabel)
    top = np.nanmax([np.nanmax(np.asarray(v, float)) for v in series.values()] + [0.0])
    if top > 0:
        ax.set_ylim(0, top * 1.15)                      # the value labels stay inside
    legend(ax, fontsize=8)
    ax.grid(axis="x", visible=False)
    return ax


def plot_kv_per_token(names: Sequence[str], bytes_per_token: Sequence[float], ax: Any = None) -> Any:
    """KV-cache bytes per token of several models, log scale, labelled in KiB / MiB."""
    ax = _ax(ax, (7.0, 0.6 * len(names) + 1.4))
    v = np.asarray(bytes_per_token, dtype=float)
    y = np.arange(len(names))
    ax.barh(y, v, color="C2")
    for yi, val in zip(y, v):
        txt = f"{val / 2**10:.0f} KiB" + (f" = {val / 2**20:g} MiB" if val >= 2**19 else "")
        ax.annotate(f" {int(val):,} B = {txt}", (val, yi), va="center", fontsize=8)
    ax.set_yticks(y, list(names))
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(v.min() / 2, v.max() * 15)
    ax.set_xlabel(zh("每 token 的 KV 字节数（对数轴）", "KV bytes per token (log)"))
    ax.grid(axis="y", visible=False)
    return ax


def plot_concurrency_vs_context(contexts: Sequence[int], sequences: Mapping[str, Sequence[int]],
                                ax: Any = None) -> Any:
    """How many sequences fit in a KV budget as the tokens per sequence grow (log-log)."""
    ax = _ax(ax)
    for i, (label, counts) in enumerate(sequences.items()):
        ax.plot(contexts, counts, "o-", color=f"C{i}", label=label, ms=4)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(zh("每条序列的 token 数（提示 + 输出）", "tokens per sequence"))
    ax.set_ylabel(zh("可并发的序列数", "concurrent sequences"))
    legend(ax, fontsize=8)
    return ax
