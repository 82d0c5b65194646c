"""The figures of chapters 00 and 06–09, drawn from the chapters' own inputs: no legend over the
data, a legend entry for every labelled mark; for chapter 00 (viz.draw) also the data drawn.

The data of the chapter 06–09 figures, drawn from small rows, is checked next to the course code
that makes the rows (tests/test_engineering.py, test_cases.py, test_seed_redo.py,
test_misconceptions.py); figures without a legend are not repeated here.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)

from batchlab.course import cases as C  # noqa: E402
from batchlab.course import engineering as E  # noqa: E402
from batchlab.course import misconceptions as M  # noqa: E402
from batchlab.course import seed_demo as sd  # noqa: E402
from batchlab.course import seed_redo as R  # noqa: E402
from batchlab.course.presets import LLM_COST  # noqa: E402
from batchlab.lm import ToyLM  # noqa: E402
from batchlab.plotting import cases as PC  # noqa: E402
from batchlab.plotting import demo as PD  # noqa: E402
from batchlab.plotting import engineering as PE  # noqa: E402
from batchlab.plotting import misconceptions as PM  # noqa: E402
from batchlab.plotting import cjk_available  # noqa: E402
from batchlab.sim import simulate_continuous  # noqa: E402
from batchlab.theory.kv import MODEL_SHAPES, kv_bytes_for, kv_plan_table, plan_kv  # noqa: E402
from batchlab.viz import DemoParams, default_horizon, run_demo, stateless_sweep, utilization_sweep  # noqa: E402
from batchlab.viz.draw import draw_frame, draw_utilization, new_figure, plot_utilization_sweep  # noqa: E402
from plotting_check import assert_clean, legend_of  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    assert cjk_available(), "a CJK font is installed: the labels below are the Chinese ones"
    yield
    plt.close("all")


# ----------------------------------------------------------------------------- chapter 00 (viz.draw)


@pytest.fixture(scope="module")
def lanes():
    return run_demo(DemoParams())


def test_draw_utilization_legend_below_the_100_percent_lines(lanes) -> None:
    horizon = default_horizon(lanes)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    draw_utilization(ax, lanes, horizon, window_s=0.5)
    assert ax.get_ylim() == (0, 105) and ax.get_xlim() == (0, horizon)
    assert len(ax.lines) == 2 * len(lanes)
    assert max(max(ln.get_ydata()) for ln in ax.lines) == pytest.approx(100.0)   # a lane runs full
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"{lane.name} 满锅率" for lane in lanes] + [
        "实线：满锅率", "虚线：忙碌率"]                                          # lane colours, then the line styles
    assert not ax.texts                                                        # the note is in the legend
    assert_clean(fig)
    assert ax.get_legend().get_window_extent().y1 < ax.bbox.y0                 # under the axes


def test_plot_utilization_sweep_generation_and_stateless() -> None:
    gen = utilization_sweep([1, 2, 3, 4, 6, 8, 10, 12, 14, 16])
    sl = stateless_sweep([20, 40, 60, 100, 150, 200, 230, 260])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    plot_utilization_sweep(axes[0], gen, title="生成式请求（锅容量 8）")
    plot_utilization_sweep(axes[1], sl, title="无状态请求（锅容量 8）")
    for ax, rows in zip(axes, (gen, sl)):
        lanes_ = sorted({r["lane"] for r in rows})
        assert len(ax.lines) == len(lanes_) + 1 + 2                           # fills, one busy, guides
        first = [r for r in rows if r["lane"] == lanes_[0]]
        np.testing.assert_allclose(ax.lines[0].get_ydata(), [100 * r["fill"] for r in first])
        assert ax.get_ylim() == (0, 105) and ax.get_xlabel() == "到达率 λ (请求/s)"
        assert legend_of(ax) == [f"{first[0]['name']} 满锅率", f"{first[0]['name']} 忙碌率（nvidia-smi 口径）"] + [
            f"{r['name']} 满锅率" for r in rows if r["lane"] != lanes_[0] and r["rate"] == first[0]["rate"]]
    assert_clean(fig)


def test_an_animation_frame_keeps_its_legend_off_the_data(lanes) -> None:
    horizon = default_horizon(lanes)
    fig = new_figure(len(lanes))
    for t in (0.5, horizon / 2, horizon):
        draw_frame(fig, lanes, t, horizon)
        assert len(fig.axes) == len(lanes) + 1 and fig.get_suptitle() == f"t = {t:.2f} s"
        assert_clean(fig)


# ----------------------------------------------------------------------------- chapters 06–09


def test_plot_starvation_three_policies() -> None:
    fig = PE.plot_starvation(E.starvation_experiment(), ("fifo", "priority", "priority_timeout"))
    assert legend_of(fig.axes[-1]) == ["高优先级", "低优先级", "被拒绝"]
    assert_clean(fig)


def test_plot_delay_bound_lines_and_the_delay() -> None:
    fig = PE.plot_delay_bound(E.delay_bound_experiment([0.05, 0.2, 0.5, 0.8, 0.95, 1.1], delay_ms=5.0))
    assert legend_of(fig.axes[0]) == ["p50", "p99", "最长", "排队延时 max_queue_delay"]
    assert_clean(fig)


def test_plot_kv_plan_counts_inside_the_axes() -> None:
    plan = kv_plan_table(["Llama-2-7B", "Llama-3-8B"], "H100-SXM", [2048, 4096, 8192, 32768])
    fig = PE.plot_kv_plan(plan)
    (ax,) = fig.axes
    assert legend_of(ax) == ["Llama-2-7B", "Llama-3-8B"]
    xs, ys = [r["seq_len"] for r in plan], [r["max_sequences"] for r in plan]
    assert ax.get_xlim()[0] < min(xs) and max(xs) * 1.5 < ax.get_xlim()[1]     # room for the counts
    assert ax.get_ylim()[0] < min(ys) and max(ys) * 2 < ax.get_ylim()[1]
    assert_clean(fig)


def test_plot_utilisation_readings_two_readings() -> None:
    fig = PC.plot_utilisation_readings(np.linspace(1, 16, 61), C.overhead_ratio(0.22), 295, C.ECOMMERCE)
    assert len(legend_of(fig.axes[0])) == 2
    assert_clean(fig)


def test_plot_fairness_linear_bars_labelled() -> None:
    fair = C.fairness_experiment(rate_short=2.0, rate_long=0.2)
    fig = PC.plot_fairness(fair, {"static": "动态批处理器（请求级补齐批）", "continuous": "连续批处理"})
    (ax,) = fig.axes
    assert legend_of(ax) == ["短单", "长单"]
    top = max(t.get_window_extent().y1 for t in ax.texts)
    assert len(ax.texts) == len(fair) and top <= ax.bbox.y1                     # value labels inside
    assert_clean(fig)


def test_plot_slots_article_against_batchlab_sim() -> None:
    tr40 = sd.trace_sim(4, 3.0, True)
    arr40, len40 = R.workload_from_trace(tr40)
    cont = simulate_continuous(arr40, np.ones_like(len40), len40, R.ARTICLE_COST, max_active=4)
    fig = PD.plot_slots([("原文「序列模式」：空位不补", *PD.trace_occupancy(tr40)),
                         ("batchlab.sim 连续批处理：空位下一步就补", *PD.sim_occupancy(cont, np.arange(0, 45, 0.05)))],
                        capacity=4, t_max=45)
    assert legend_of(fig.axes[0]) == ["锅里（运行中）", "门口排队", "锅容量"]
    assert_clean(fig)


def test_plot_batch_size_capacity_and_full_batch_time() -> None:
    fig = PM.plot_batch_size(M.batch_size_sweep([1, 2, 4, 8, 16, 32, 64, 128], rate=450, delays_us=(0, 5000)))
    ax, tw = fig.axes
    assert legend_of(ax, tw) == ["容量 B/t(B)", "Amdahl 上限 1/b", "满批一次执行 t(B)"]
    assert_clean(fig)


@pytest.mark.slow
def test_plot_llm_batch_throughput_and_kv() -> None:
    bpt = kv_bytes_for("Llama-3-8B")
    h100 = plan_kv(80e9, MODEL_SHAPES["Llama-3-8B"].params_b * 1e9 * 2, bpt, tokens_per_sequence=1)
    llm = M.llm_batch_sweep([16, 64, 256, 512], LLM_COST, bpt, h100.kv_budget_bytes)
    fig = PM.plot_llm_batch(llm, h100.kv_budget_bytes / 2**30)
    assert legend_of(fig.axes[1]) == ["满额所需 KV", "实际 KV 峰值", "显存里的 KV 预算"]
    assert_clean(fig)


@pytest.mark.slow
def test_plot_delay_sweep_throughput_and_busy_time() -> None:
    fig = PM.plot_delay_sweep(M.delay_sweep([0, 100, 1000, 5000, 20000], [0.1, 0.5, 0.9, 1.2]))
    assert legend_of(fig.axes[1]) == ["负载 10%", "负载 50%", "负载 90%", "负载 120%"]
    assert_clean(fig)


@pytest.mark.slow
def test_plot_kv_growth_measured_and_formula() -> None:
    toy, scaled = M.kv_growth(ToyLM.default(), [1, 4, 16, 32], tokens_per_seq=1024)
    fig = PM.plot_kv_growth(toy, scaled, 60.0)
    assert legend_of(fig.axes[0]) == ["公式", "实测：有效", "实测：已分配"]
    assert legend_of(fig.axes[1])[-1] == "KV 预算"
    assert_clean(fig)


def test_plot_day_rate_instances_and_p99() -> None:
    rates = M.day_rates(100, 2000)
    day = M.day_experiment(rates, slo_p99_ms=100.0, fixed_instances=(2, 3))
    fig = PM.plot_day(rates, day, 100.0, {"fixed_2": "固定 2 实例", "fixed_3": "固定 3 实例", "retuned": "每小时重调"})
    assert len(legend_of(fig.axes[1])) == len(day)
    assert_clean(fig)


# ----------------------------------------------------------------------------- chapter 11


def test_ch11_rounds_bars_are_the_medians_with_min_max_error_bars():
    from batchlab.plotting import llm_serving as PL

    spread = {"lm_whole": (110.0, 100.0, 200.0), "lm_chunk32": (30.0, 25.0, 90.0)}
    fig = PL.plot_rounds(spread, {"lm_whole": "不分块", "lm_chunk32": "预算 32"}, "ITL p99 (ms)", "分块预填充")
    ax = fig.axes[0]
    assert [b.get_height() for b in ax.patches] == [110.0, 30.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["不分块", "预算 32"]
    segs = ax.collections[0].get_segments()
    assert [(s[0][1], s[1][1]) for s in segs] == [(100.0, 200.0), (25.0, 90.0)]
    assert legend_of(ax) == ["各轮最低…最高"] and ax.get_ylabel() == "ITL p99 (ms)"
    assert_clean(ax)


def test_ch11_budget_tradeoff_draws_the_simulated_rows():
    from batchlab.course import llm_serving as L
    from batchlab.plotting import llm_serving as PL
    from batchlab.sim.service import TokenCost

    rows = [L.sim_mixed(m, TokenCost(prefill_per_token=200, decode_base=4500, decode_per_seq=150)) for m in (None, 128, 32)]
    ax = PL.plot_budget_tradeoff(rows).axes[0]
    itl, ttft, whole = ax.get_lines()[:3]
    assert list(itl.get_xdata()) == [128, 32] and list(itl.get_ydata()) == [r["itl_p99_ms"] for r in rows[1:]]
    assert list(ttft.get_ydata()) == [r["long_ttft_p50_ms"] for r in rows[1:]]
    assert whole.get_ydata()[0] == rows[0]["itl_p99_ms"]
    assert legend_of(ax) == ["解码序列 ITL p99", "长提示 TTFT p50", "不分块时的 ITL p99"]
    assert_clean(ax)


def test_ch11_goodput_draws_attainment_against_rate_with_the_target_and_the_goodput():
    from batchlab.plotting import llm_serving as PL

    rows = [{"policy": p, "rate": r, "attainment": a} for p, pts in
            (("whole", ((1.0, 0.95), (2.0, 0.8))), ("chunked 32", ((1.0, 1.0), (2.0, 0.92)))) for r, a in pts]
    ax = PL.plot_goodput(rows, 0.9, {"whole": 1.0, "chunked 32": 2.0}).axes[0]
    lines = ax.get_lines()
    assert list(lines[0].get_ydata()) == [95.0, 80.0] and list(lines[2].get_ydata()) == [100.0, 92.0]
    assert [tuple(ln.get_xdata()) for ln in (lines[1], lines[3])] == [(1.0,), (2.0,)]   # the goodput marks
    assert lines[-1].get_ydata()[0] == 90.0                                             # the target
    assert legend_of(ax) == ["整段提示（Orca）", "分块 32（Sarathi）", "目标 90%（空心圈：goodput）"]
    assert_clean(ax)
