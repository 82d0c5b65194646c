"""Checks of Lab 6 (GPU / roofline): the roofline bound, the ridge batch size, the measured knee."""

from __future__ import annotations

import math
from typing import Any, Callable

from batchlab.labs._core import Grader, check
from batchlab.theory.roofline import H100_SXM, H200, knee_batch, ridge_batch, ridge_point, roofline_time


def _close(a: float, b: float, rel: float = 0.01) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * abs(b)


def _diagnose_roofline(got: float, batch: int, p: float, s: float, bw: float, peak: float) -> str:
    """Name the usual mistake that produces `got`, or ''."""
    mem, comp = p * s / bw, 2 * p * batch / peak
    right = max(mem, comp)
    wrong = [
        (mem + comp, "你把读权重的时间和计算时间相加了。屋顶线取两者中较大的一个（max）：读和算可以重叠进行"),
        (max(mem, comp / 2), "算力那一项少了一半：每个权重对每条序列做一次乘加 = 2 FLOP，应是 2·P·B / F"),
        (max(mem * batch, comp), "权重每步只读一次：读的字节数是 P·s，不随 batch 增长"),
        (mem, "只算了读权重的时间：别忘了算力那一项 2·P·B / F，batch 大了它会超过读权重的时间"),
        (max(p / bw, comp), "权重字节数 = 参数个数 × 每个参数的字节数（bf16 是 2）"),
    ]
    for value, why in wrong:
        if not _close(value, right) and _close(got, value):
            return why
    return ""


@check("lab6.q1", points=3, title="decode 一步的屋顶线下界", shortcuts=(roofline_time,))
def check_roofline_time(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(batch, n_params, bytes_per_param, bandwidth, peak_flops)` -> seconds."""
    bw, peak = H100_SXM.bandwidth, H100_SXM.peak_flops
    p, s = 7e9, 2
    cases = [
        (1, "batch 1：{ms:.2f} ms = 14 GB ÷ 3.35 TB/s，读权重是下界"),
        (8, "batch 8 与 batch 1 一样快（{ms:.2f} ms）：权重每步只读一次，多 7 条序列几乎免费"),
        (1024, "batch 1024 受算力限制：2·P·B / F = {ms:.2f} ms"),
    ]
    for batch, good in cases:
        got = g.number(g.call(fn, batch, p, s, bw, peak), "roofline_time")
        want = roofline_time(batch, p, s, bw, peak)
        why = _diagnose_roofline(got, batch, p, s, bw, peak)
        g.expect(_close(got, want), good.format(ms=want * 1e3),
                 f"7B 模型 bf16、H100、batch {batch}：应为 {want * 1e3:.2f} ms，你的函数给出 {got * 1e3:.4g} ms。"
                 + (why or "回头看看公式 max(P·s / BW, 2·P·B / F)"))


@check("lab6.q2", points=3, title="decode 变成算力受限的批大小", shortcuts=(ridge_batch, ridge_point))
def check_ridge_batch(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(bandwidth, peak_flops, bytes_per_param)` -> batch size B* at the ridge."""
    for hw, label in ((H100_SXM, "H100 SXM"), (H200, "H200")):
        got = g.number(g.call(fn, hw.bandwidth, hw.peak_flops, 2), "ridge_batch")
        want = ridge_batch(hw.bandwidth, hw.peak_flops, 2)
        inverted = _close(got, 1 / want) or _close(got, hw.bandwidth / hw.peak_flops)
        g.expect(_close(got, want), f"{label}（bf16）：B* ≈ {got:.0f}",
                 f"{label}：你的结果是倒数。屋脊点 = 峰值算力 ÷ 带宽（FLOP/字节），应约为 {want:.0f}" if inverted else
                 f"{label}（bf16）应约为 {want:.0f}（{hw.peak_flops / 1e12:.0f} TFLOP/s ÷ "
                 f"{hw.bandwidth / 1e12:.2f} TB/s），你的函数给出 {got:.4g}")
    bw, peak = 40e9, 200e9  # a CPU in float32: ridge 5 FLOP/B
    got = g.number(g.call(fn, bw, peak, 4), "ridge_batch")
    want = ridge_batch(bw, peak, 4)
    g.expect(_close(got, want), f"float32 的 CPU（40 GB/s、200 GFLOP/s）：B* = {got:.0f}，是屋脊点 5 的 2 倍",
             "float32 时不对：你返回了屋脊点本身（FLOP/字节）。decode 的强度是 2·B / s FLOP/字节，"
             "所以 B* = 屋脊点 × s / 2；bf16 时 s = 2 恰好抵消，float32 时 s = 4" if _close(got, 5.0) else
             f"float32 的 CPU（40 GB/s、200 GFLOP/s）应为 B* = {want:.0f}，你的函数给出 {got:.4g}")


@check("lab6.q3", points=3, title="从测量曲线找拐点", shortcuts=(knee_batch,))
def check_knee(g: Grader, fn: Callable[..., Any]) -> None:
    """`fn(batches, seconds)` -> the batch size where the measured curve leaves its floor."""
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    sharp = [max(1e-3, b * 1e-3 / 64) for b in batches]
    got = g.number(g.call(fn, batches, sharp), "knee")
    g.expect(32 <= got <= 96, f"理想屋顶线形状（拐点 64）：你估计 {got:.0f}",
             f"在理想的屋顶线形状（1 ms 平台，B=64 以后线性）上，拐点应在 64 左右，你的函数给出 {got:.4g}。"
             "提示：平台高度 ÷ 大批量那段的斜率（秒/序列）")
    smooth = [1e-3 + b * 1e-3 / 64 for b in batches]
    got = g.number(g.call(fn, batches, smooth), "knee")
    want = knee_batch(batches, smooth)
    g.expect(0.6 * 64 <= got <= 1.5 * 64, f"平滑曲线（t = 1 ms + B/64 ms）：你估计 {got:.0f}（参考实现 {want:.0f}）",
             f"对平滑曲线 t = 1 ms + B·(1/64) ms，拐点应在 64 附近（参考实现得 {want:.0f}），你的函数给出 {got:.4g}")
    flat = [1e-3 * (1 + 0.001 * i) for i in range(len(batches))]
    got = g.number(g.call(fn, batches, flat), "knee")
    g.expect(math.isinf(got) or got >= batches[-1],
             "一直平的曲线：返回 inf（到测过的最大批量还在受带宽限制）",
             f"曲线到 B=512 还是平的，拐点不在测量范围内：应返回 math.inf（或不小于 512 的数），你的函数给出 {got:.4g}")
