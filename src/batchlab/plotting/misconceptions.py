"""Figures of chapter 09 (常见误区), drawn from the rows of `batchlab.course.misconceptions`."""

from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from batchlab.plotting.fonts import figure, zh
from batchlab.plotting.layout import legend

def plot_batch_size(rows: Sequence[dict[str, Any]]) -> Figure:
    """Capacity B/t(B) against max_batch_size with the Amdahl ceiling 1/b, and the time of a
    full execution t(B) on a twin axis (rows from `misconceptions.batch_size_sweep`, delay 0)."""
    sub = [r for r in rows if r["delay_us"] == rows[0]["delay_us"]]
    b = [r["max_batch_size"] for r in sub]
    fig, ax = figure(figsize=(6.6, 3.6))
    ax.plot(b, [r["capacity_rps"] for r in sub], "-o", color="C0", label=zh("容量 B/t(B)", "capacity B/t(B)"))
    ax.axhline(sub[0]["amdahl_ceiling_rps"], color="C0", ls="--", label=zh("Amdahl 上限 1/b", "Amdahl ceiling 1/b"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("max_batch_size")
    ax.set_ylabel(zh("容量 (请求/s)", "capacity (req/s)"), color="C0")
    tw = ax.twinx()
    tw.plot(b, [r["t_full_ms"] for r in sub], "-s", color="C3", label=zh("满批一次执行 t(B)", "full execution t(B)"))
    tw.set_ylabel(zh("满批执行时间 (ms)", "full-batch time (ms)"), color="C3")
    tw.grid(False)
    ax.set_title(zh("批上限越大，容量越贴近 1/b，满批一次执行越久", "capacity saturates at 1/b while a full batch takes longer"), fontsize=10)
    legend(ax, fontsize=8, axes=[tw], outside="below", ncol=3)
    return fig


def plot_llm_batch(rows: Sequence[dict[str, Any]], budget_gib: float | None) -> Figure:
    """Continuous batching: tokens/s and time between tokens against the cap on running
    sequences; KV needed against the budget (rows from `misconceptions.llm_batch_sweep`)."""
    m = [r["max_active"] for r in rows]
    fig, axes = figure(1, 2, figsize=(9.2, 3.6))
    ax = axes[0]
    ax.plot(m, [r["tokens_per_s"] for r in rows], "-o", color="C0", label=zh("吞吐 token/s", "tokens/s"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel(zh("最多同时运行的序列", "max running sequences"))
    ax.set_ylabel("token/s", color="C0")
    tw = ax.twinx()
    tw.plot(m, [r["itl_ms"] for r in rows], "-s", color="C3", label=zh("两 token 间隔 (ms)", "inter-token (ms)"))
    tw.set_ylabel(zh("两 token 间隔 (ms)", "inter-token time (ms)"), color="C3")
    tw.grid(False)
    ax.set_title(zh("吞吐见顶，单 token 延迟线性涨", "throughput saturates, ITL grows"))
    ax = axes[1]
    ax.plot(m, [r["kv_need_gib"] for r in rows], "-o", label=zh("满额所需 KV", "KV needed"))
    ax.plot(m, [r["kv_peak_gib"] for r in rows], "-s", label=zh("实际 KV 峰值", "KV peak"))
    if budget_gib:
        ax.axhline(budget_gib, color="k", ls="--", label=zh("显存里的 KV 预算", "KV budget"))
    ax.set_xscale("log", base=2)
    ax.set(xlabel=zh("最多同时运行的序列", "max running sequences"), ylabel="GiB",
           title=zh("KV Cache 随并发线性增长", "KV grows with concurrency"))
    legend(ax, fontsize=8)
    return fig


def plot_combination(rows: Sequence[dict[str, Any]], labels: dict[str, str] | None = None) -> Figure:
    """p99 latency at the same load, and capacity (tokens/s), per scheduler."""
    names = [(labels or {}).get(r["scheduler"], r["scheduler"]) for r in rows]
    x = np.arange(len(rows))
    fig, axes = figure(1, 2, figsize=(9.0, 3.4))
    axes[0].bar(x, [r["p99_s"] for r in rows], color=["C0", "C1", "C2"][: len(rows)])
    axes[0].set_ylabel(zh("同一负载下 p99 (s)", "p99 at the same load (s)"))
    axes[1].bar(x, [r.get("capacity_tokens_per_s") or 0 for r in rows], color=["C0", "C1", "C2"][: len(rows)])
    axes[1].set_ylabel(zh("容量 (token/s)", "capacity (tokens/s)"))
    axes[0].set_title(zh("提前返回只缩短一部分延迟", "early return only shortens some latency"), fontsize=10)
    axes[1].set_title(zh("容量来自迭代级调度", "capacity comes from iteration-level scheduling"), fontsize=10)
    for ax in axes:
        ax.set_xticks(x, names, fontsize=9)
    return fig


def plot_delay_sweep(rows: Sequence[dict[str, Any]]) -> Figure:
    """Throughput and GPU time per request against max_queue_delay, one line per load."""
    loads = list(dict.fromkeys(r["load"] for r in rows))
    fig, axes = figure(1, 2, figsize=(9.4, 3.6))
    for i, load in enumerate(loads):
        sub = [r for r in rows if r["load"] == load]
        d = [max(r["delay_us"] / 1e3, 0.01) for r in sub]
        lab = zh(f"负载 {100 * load:g}%", f"load {100 * load:g}%")
        axes[0].plot(d, [r["throughput_rps"] for r in sub], "-o", color=f"C{i}", label=lab)
        axes[1].plot(d, [r["gpu_ms_per_req"] for r in sub], "-o", color=f"C{i}", label=lab)
    for ax in axes:
        ax.set(xscale="log", xlabel=zh("max_queue_delay (ms，0 画在 0.01)", "max_queue_delay (ms; 0 drawn at 0.01)"))
    axes[0].set(ylabel=zh("吞吐 (请求/s)", "throughput (req/s)"), title=zh("吞吐没有塌", "throughput does not collapse"))
    axes[1].set(ylabel=zh("每请求占用实例时间 (ms)", "busy ms per request"),
                title=zh("小延时的真实代价：更多执行", "the real cost: more executions"))
    legend(axes[1], fontsize=8, outside="right")
    return fig


def plot_kv_growth(toy: Sequence[dict[str, Any]], scaled: Sequence[dict[str, Any]], budget_gib: float | None = None) -> Figure:
    """Left: the toy LM's measured KV bytes against concurrency with the formula line. Right: the
    same concurrencies for real models (GiB), with a KV budget."""
    fig, axes = figure(1, 2, figsize=(9.2, 3.6))
    n = np.asarray([r["n"] for r in toy])
    axes[0].plot(n, [r["formula_bytes"] / 2**20 for r in toy], "-", color="k", label=zh("公式", "formula"))
    axes[0].plot(n, [r["used_bytes"] / 2**20 for r in toy], "o", color="C0", label=zh("实测：有效", "measured: used"))
    axes[0].plot(n, [r["allocated_bytes"] / 2**20 for r in toy], "x", color="C3", label=zh("实测：已分配", "measured: allocated"))
    axes[0].set(xlabel=zh("并发序列数", "concurrent sequences"), ylabel="MiB", title=zh("课程玩具模型（实测）", "toy LM (measured)"))
    legend(axes[0], fontsize=8)
    ns = [r["n"] for r in scaled]
    for key in [k for k in scaled[0] if k != "n"]:
        axes[1].plot(ns, [r[key] for r in scaled], "-o", label=key)
    if budget_gib:
        axes[1].axhline(budget_gib, color="k", ls="--", label=zh("KV 预算", "KV budget"))
    axes[1].set(xlabel=zh("并发序列数", "concurrent sequences"), ylabel="GiB", title=zh("真实模型（公式）", "real models (formula)"))
    legend(axes[1], fontsize=8)
    return fig


def plot_day(rates: Sequence[float], results: Sequence[Any], slo_ms: float, labels: dict[str, str] | None = None) -> Figure:
    """Top: the day's request rate. Middle: instances per policy (integer ticks). Bottom: p99 per
    hour (log) against the SLO, unstable hours drawn as triangles at the top edge; every mark in a
    legend."""
    h = np.arange(len(rates))
    fig, axes = figure(3, 1, figsize=(7.6, 7.4), sharex=True)
    axes[0].bar(h, rates, color="0.6")
    axes[0].set_ylabel(zh("请求/s", "req/s"))
    axes[0].set_title(zh("固定实例数：按均值定死，高峰违约；按峰值定死，全天多花",
                         "a fixed fleet either misses the SLO at the peak or pays for the peak all day"), fontsize=9)
    top = max(max((x for x in r.p99_ms if np.isfinite(x)), default=slo_ms) for r in results) * 3
    for i, r in enumerate(results):
        name = (labels or {}).get(r.policy, r.policy)
        axes[1].step(h, r.instances, where="mid", color=f"C{i}", label=f"{name}（{r.instance_hours} 实例·时）")
        p = np.asarray(r.p99_ms, dtype=float)
        bad = ~np.isfinite(p)
        axes[2].plot(h, np.where(bad, np.nan, p), "-o", color=f"C{i}", ms=3, label=name)
        if bad.any():
            lab = f"{name}：{zh('不稳定的小时（队列无限增长，画在顶边）', 'unstable hour (drawn at the top)')}"
            axes[2].scatter(h[bad], np.full(bad.sum(), top), marker="^", color=f"C{i}", zorder=3, label=lab)
    axes[1].set(ylabel=zh("实例数", "instances"), ylim=(0, max(max(r.instances) for r in results) + 1))
    axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
    legend(axes[1], fontsize=8, outside="right")
    axes[2].axhline(slo_ms, ls="--", color="k", label=f"SLO：p99 ≤ {slo_ms:g} ms")
    axes[2].set(yscale="log", ylabel="p99 (ms)", xlabel=zh("小时", "hour"), ylim=(None, top * 1.5))
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    legend(axes[2], fontsize=8, outside="right")
    return fig
