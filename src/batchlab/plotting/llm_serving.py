"""Figures of chapter 11 (今天的大模型服务), drawn from the rows of `batchlab.course.llm_serving`."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from batchlab.plotting.fonts import figure, zh
from batchlab.plotting.layout import legend


def plot_rounds(spread: Mapping[str, tuple[float, float, float]], labels: Mapping[str, str], ylabel: str,
                title: str) -> Figure:
    """One bar per model: the median over interleaved rounds, the error bar from the lowest to the
    highest round (`spread`: model -> (median, min, max), from `llm_serving.median_spread`)."""
    names = list(spread)
    med, lo, hi = np.array([spread[m] for m in names], dtype=float).T
    fig, ax = figure(figsize=(5.6, 3.4))
    x = np.arange(len(names))
    ax.bar(x, med, width=0.6, color=[f"C{i}" for i in range(len(names))])
    ax.errorbar(x, med, yerr=[med - lo, hi - med], fmt="none", ecolor="k", capsize=4,
                label=zh("各轮最低…最高", "rounds' min…max"))
    for xi, v in zip(x, med):
        ax.text(xi + 0.32, v, f"{v:.0f}", ha="left", va="center", fontsize=9)  # beside the error bar
    ax.set_xticks(x, [labels.get(m, m) for m in names])
    ax.set(ylabel=ylabel, title=title)
    legend(ax, fontsize=8)
    return fig


def plot_budget_tradeoff(rows: Sequence[Mapping[str, float]]) -> Figure:
    """Simulated: the decoders' ITL p99 and the long prompts' TTFT p50 against the per-step token
    budget (rows from `llm_serving.sim_mixed`; budget 0 = no cap, drawn at the right end)."""
    capped = [r for r in rows if r["max_num_tokens"]]
    m = [r["max_num_tokens"] for r in capped]
    fig, ax = figure(figsize=(6.4, 3.6))
    ax.plot(m, [r["itl_p99_ms"] for r in capped], "-o", color="C0", label=zh("解码序列 ITL p99", "decoders' ITL p99"))
    ax.plot(m, [r["long_ttft_p50_ms"] for r in capped], "-s", color="C3", label=zh("长提示 TTFT p50", "long prompts' TTFT p50"))
    whole = [r for r in rows if not r["max_num_tokens"]]
    if whole:
        ax.axhline(whole[0]["itl_p99_ms"], color="C0", ls="--", label=zh("不分块时的 ITL p99", "ITL p99 unchunked"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(m, [str(x) for x in m])
    ax.minorticks_off()
    ax.set(xlabel=zh("每步 token 预算 max_num_tokens", "max_num_tokens"), ylabel="ms",
           title=zh("预算越小，解码越平稳，长提示的首 token 越晚", "smaller budget: steadier decode, later TTFT"))
    legend(ax, fontsize=8, outside="below", ncol=3)
    return fig


#: Chinese names of the step policies (`llm_serving.STEP_SETTINGS`) in legends and tables.
POLICY_ZH = {"prefill_first": "先预填充（vLLM V0）", "whole": "整段提示（Orca）",
             "chunked 32": "分块 32（Sarathi）", "chunked 128": "分块 128（Sarathi）"}


def plot_goodput(rows: Sequence[Mapping[str, float]], target: float, goodput: Mapping[str, float]) -> Figure:
    """Simulated SLO attainment against the arrival rate, one line per step policy (rows from
    `llm_serving.sim_goodput`), the target as a dashed line and each policy's goodput (`goodput`,
    from `llm_serving.goodput`) as a hollow marker on its line."""
    fig, ax = figure(figsize=(6.4, 3.8))
    styles = ("-o", "--s", "-^", ":D")
    for k, policy in enumerate(dict.fromkeys(r["policy"] for r in rows)):
        mine = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["rate"])
        x, y = [r["rate"] for r in mine], [100 * r["attainment"] for r in mine]
        ax.plot(x, y, styles[k % len(styles)], color=f"C{k}", ms=4, label=zh(POLICY_ZH.get(policy, policy), policy))
        g = goodput.get(policy, 0.0)
        if g > 0:
            ax.plot([g], [100 * next(r["attainment"] for r in mine if r["rate"] == g)], "o", ms=11,
                    mfc="none", color=f"C{k}")
    ax.axhline(100 * target, color="k", ls="--", lw=1, label=zh(f"目标 {100 * target:.0f}%（空心圈：goodput）",
                                                               f"target {100 * target:.0f}% (circle: goodput)"))
    ax.set(xlabel=zh("到达率（请求/s）", "arrival rate (req/s)"), ylabel=zh("两个 SLO 都达标的请求（%）", "meeting both SLOs (%)"),
           title=zh("分块 32 的一步装得进 ITL SLO：goodput 最高", "chunks of 32 fit the ITL SLO: highest goodput"), ylim=(0, 105))
    legend(ax, fontsize=8, outside="below", ncol=3)
    return fig
