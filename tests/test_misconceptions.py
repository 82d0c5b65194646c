"""batchlab.course.misconceptions: each of the article's five misconceptions as an experiment."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest

from batchlab.course import misconceptions as M
from batchlab.course.presets import LLM_COST

matplotlib.use("Agg")


def test_batch_size_sweep_saturates_and_delay_zero_never_waits():
    rows = M.batch_size_sweep([4, 8, 16, 64, 128], rate=450, delays_us=(0, 5000), n=6000)
    d0 = {r["max_batch_size"]: r for r in rows if r["delay_us"] == 0}
    caps = [d0[b]["capacity_rps"] for b in (4, 8, 16, 64, 128)]
    assert caps == sorted(caps) and caps[-1] < d0[4]["amdahl_ceiling_rps"]
    assert not d0[4]["stable"] and d0[8]["stable"]
    # with delay 0 a larger cap changes nothing once batches never reach it
    assert d0[64]["p99_ms"] == d0[128]["p99_ms"]
    d5 = {r["max_batch_size"]: r for r in rows if r["delay_us"] == 5000}
    assert d5[16]["mean_batch"] > d0[16]["mean_batch"]


def test_overload_throughput_matches_closed_form_and_amdahl():
    for r in M.overload_throughput([1, 8, 32], n=8000):
        assert r["simulated_rps"] == pytest.approx(r["closed_form_rps"], rel=0.02)
        assert r["speedup_sim"] == pytest.approx(r["amdahl_sp"], rel=0.02)


def test_llm_sweep_memory_grows_and_saturates():
    from batchlab.theory.kv import kv_bytes_for

    bpt = kv_bytes_for("Llama-3-8B")
    rows = M.llm_batch_sweep([16, 64, 256], LLM_COST, bpt, kv_budget_bytes=20 * 2**30, n=300)
    need = [r["kv_need_gib"] for r in rows]
    assert need[1] == pytest.approx(4 * need[0]) and need[2] == pytest.approx(16 * need[0])
    assert [r["fits"] for r in rows] == [True, True, False]
    assert rows[0]["preemptions"] == 0 and rows[2]["preemptions"] > 0
    assert rows[2]["kv_peak_gib"] <= 20.0 + 1e-9
    assert rows[0]["itl_ms"] < rows[1]["itl_ms"]
    # running while KV is full: what the budget holds (more than the per-iteration mean, which
    # counts ramp-up and drain); a cap the budget never reaches has no such phase
    assert rows[0]["running_kv_full"] is None
    fit = 20 * 2**30 / (need[0] * 2**30 / 16)  # sequences of the mean full length the budget holds
    assert rows[2]["running_kv_full"] > rows[2]["mean_running"]
    assert 0.8 * fit < rows[2]["running_kv_full"] < 1.5 * fit


def test_combination_beats_either_part():
    rows = {r["scheduler"]: r for r in M.combination_comparison(2.0, LLM_COST, n=600, overload_rate=30.0)}
    assert rows["combined"]["capacity_tokens_per_s"] > 2 * rows["dynamic_only"]["capacity_tokens_per_s"]
    assert rows["sequence_only"]["capacity_tokens_per_s"] == pytest.approx(
        rows["dynamic_only"]["capacity_tokens_per_s"], rel=0.03)
    assert rows["sequence_only"]["p50_s"] <= rows["dynamic_only"]["p50_s"]
    assert rows["combined"]["eta"] == pytest.approx(1.0)


def test_tiny_delay_does_not_collapse_throughput():
    rows = M.delay_sweep([0, 1000, 20000], [0.1, 1.2], n=6000)
    over = [r["throughput_rps"] for r in rows if r["load"] == 1.2]
    assert max(over) / min(over) < 1.01
    light = {r["delay_us"]: r for r in rows if r["load"] == 0.1}
    assert light[0]["throughput_rps"] == pytest.approx(light[20000]["throughput_rps"], rel=1e-3)
    # what a tiny delay does cost: more busy time per request, but lower latency
    assert light[0]["gpu_ms_per_req"] > light[20000]["gpu_ms_per_req"]
    assert light[0]["p99_ms"] < light[20000]["p99_ms"]


def test_kv_growth_is_linear_and_exact():
    from batchlab.lm import ToyLM

    toy, scaled = M.kv_growth(ToyLM.default(), [1, 2, 4], prompt_tokens=8, steps=4, tokens_per_seq=1024)
    assert all(r["used_bytes"] == r["formula_bytes"] for r in toy)
    assert toy[2]["used_bytes"] == 4 * toy[0]["used_bytes"]
    assert scaled[0]["Llama-2-7B"] == pytest.approx(0.5) and scaled[2]["Llama-3-8B"] == pytest.approx(0.5)


def test_day_rates_shape():
    r = M.day_rates(100, 2000)
    assert r.shape == (24,) and r.argmax() in (13, 14) and 100 <= r.min() < 200 and r.max() <= 2000
    assert r.mean() == pytest.approx(1050, rel=0.01)


def test_day_experiment_policies():
    rates = M.day_rates(100, 2000)
    res = {r.policy: r for r in M.day_experiment(rates, 100.0, fixed_instances=(2, 3), seconds_per_hour=2.0)}
    assert res["fixed_2"].hours_violating > 0
    assert any(not math.isfinite(x) for x in res["fixed_2"].p99_ms)
    assert res["retuned"].hours_violating == 0 and res["fixed_3"].hours_violating == 0
    assert res["retuned"].instance_hours < res["fixed_3"].instance_hours


@pytest.mark.slow
def test_misconception_plots_draw():
    """The chapter 09 figures draw the numbers they are given, with their labels."""
    import matplotlib.pyplot as plt

    from batchlab.plotting import misconceptions as P

    def texts(items):
        return [t.get_text() for t in items]

    sweep = M.batch_size_sweep([8, 16], rate=300, n=2000)
    fig = P.plot_batch_size(sweep)
    ax, tw = fig.axes
    sub = [r for r in sweep if r["delay_us"] == sweep[0]["delay_us"]]
    assert ax.get_xlabel() == "max_batch_size" and ax.get_ylabel() == "容量 (请求/s)"
    assert tw.get_ylabel() == "满批执行时间 (ms)"
    assert list(ax.lines[0].get_xdata()) == [8, 16]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [r["capacity_rps"] for r in sub])
    assert list(ax.lines[1].get_ydata()) == [sub[0]["amdahl_ceiling_rps"]] * 2
    np.testing.assert_allclose(tw.lines[0].get_ydata(), [r["t_full_ms"] for r in sub])
    assert texts(ax.get_legend().get_texts()) == ["容量 B/t(B)", "Amdahl 上限 1/b", "满批一次执行 t(B)"]
    plt.close(fig)

    llm = [{"max_active": m, "tokens_per_s": 100.0 * m, "itl_ms": 10.0 + m, "kv_need_gib": m / 4, "kv_peak_gib": m / 5}
           for m in (8, 16)]
    fig = P.plot_llm_batch(llm, 3.0)
    a0, a1, tw = fig.axes
    assert a0.get_title() == "吞吐见顶，单 token 延迟线性涨" and a1.get_title() == "KV Cache 随并发线性增长"
    assert a0.get_xlabel() == a1.get_xlabel() == "最多同时运行的序列" and a1.get_ylabel() == "GiB"
    assert list(a0.lines[0].get_xdata()) == [8, 16] and list(a0.lines[0].get_ydata()) == [800.0, 1600.0]
    assert list(tw.lines[0].get_ydata()) == [18.0, 26.0] and tw.get_ylabel() == "两 token 间隔 (ms)"
    assert [list(ln.get_ydata()) for ln in a1.lines] == [[2.0, 4.0], [1.6, 3.2], [3.0, 3.0]]
    assert texts(a1.get_legend().get_texts()) == ["满额所需 KV", "实际 KV 峰值", "显存里的 KV 预算"]
    assert len(P.plot_llm_batch(llm, None).axes[1].lines) == 2  # no budget, no budget line
    plt.close("all")

    combo = [{"scheduler": s, "p99_s": 1.0 + i, "capacity_tokens_per_s": c}
             for i, (s, c) in enumerate((("a", 10.0), ("b", 20.0), ("c", None)))]
    fig = P.plot_combination(combo, labels={"a": "只有动态批"})
    a0, a1 = fig.axes
    assert a0.get_ylabel() == "同一负载下 p99 (s)" and a1.get_ylabel() == "容量 (token/s)"
    assert [b.get_height() for b in a0.patches] == [1.0, 2.0, 3.0]
    assert [b.get_height() for b in a1.patches] == [10.0, 20.0, 0.0]  # no capacity: drawn as 0
    assert texts(a0.get_xticklabels()) == ["只有动态批", "b", "c"]
    plt.close(fig)

    delays = [{"load": load, "delay_us": d, "throughput_rps": 10.0 * load + d / 1e3, "gpu_ms_per_req": 1.0 + d / 1e4}
              for load in (0.1, 0.5) for d in (0, 1000)]
    fig = P.plot_delay_sweep(delays)
    a0, a1 = fig.axes
    assert a0.get_title() == "吞吐没有塌" and a1.get_title() == "小延时的真实代价：更多执行"
    assert a0.get_ylabel() == "吞吐 (请求/s)" and a1.get_ylabel() == "每请求占用实例时间 (ms)"
    assert len(a0.lines) == len(a1.lines) == 2 and texts(a1.get_legend().get_texts()) == ["负载 10%", "负载 50%"]
    for i, load in enumerate((0.1, 0.5)):
        assert list(a0.lines[i].get_xdata()) == [0.01, 1.0]  # delay 0 is drawn at 0.01 ms on the log axis
        assert list(a0.lines[i].get_ydata()) == pytest.approx([10.0 * load, 10.0 * load + 1.0])
        assert list(a1.lines[i].get_ydata()) == pytest.approx([1.0, 1.1])
    plt.close(fig)

    toy = [{"n": n, "formula_bytes": n * 2**20, "used_bytes": n * 2**20, "allocated_bytes": n * 2**21} for n in (1, 2)]
    scaled = [{"n": n, "Llama-2-7B": n * 2.0, "Llama-3-8B": n * 0.5} for n in (1, 2)]
    fig = P.plot_kv_growth(toy, scaled, 3.0)
    a0, a1 = fig.axes
    assert a0.get_title() == "课程玩具模型（实测）" and a1.get_title() == "真实模型（公式）"
    assert a0.get_ylabel() == "MiB" and a1.get_ylabel() == "GiB" and a0.get_xlabel() == "并发序列数"
    assert [list(ln.get_ydata()) for ln in a0.lines] == [[1.0, 2.0], [1.0, 2.0], [2.0, 4.0]]  # MiB
    assert [list(ln.get_ydata()) for ln in a1.lines] == [[2.0, 4.0], [0.5, 1.0], [3.0, 3.0]]
    assert texts(a1.get_legend().get_texts()) == ["Llama-2-7B", "Llama-3-8B", "KV 预算"]
    plt.close(fig)

    rates = M.day_rates(100, 600)
    day = M.day_experiment(rates, 100.0, fixed_instances=(1,), seconds_per_hour=1.0)
    h = len(rates)  # and a policy that loses two hours (no finite p99): drawn as markers at the top
    day.append(M.DayResult("lossy", [1] * h, [50.0] * (h - 2) + [math.inf, math.nan], [True] * (h - 2) + [False] * 2))
    fig = P.plot_day(rates, day, 100.0)
    a0, a1, a2 = fig.axes
    assert [b.get_height() for b in a0.patches] == pytest.approx(list(rates))
    assert a0.get_ylabel() == "请求/s" and a1.get_ylabel() == "实例数" and a2.get_ylabel() == "p99 (ms)"
    assert a2.get_xlabel() == "小时" and a2.get_yscale() == "log"
    assert texts(a1.get_legend().get_texts()) == [f"{r.policy}（{r.instance_hours} 实例·时）" for r in day]
    for i, r in enumerate(day):
        assert list(a1.lines[i].get_ydata()) == list(r.instances)
        p = np.asarray(r.p99_ms, dtype=float)
        np.testing.assert_allclose(a2.lines[i].get_ydata(), np.where(np.isfinite(p), p, np.nan))
    assert list(a2.lines[len(day)].get_ydata()) == [100.0, 100.0]  # the SLO
    # hours without a finite p99 are marked at the top edge, one marker each
    (marks,) = a2.collections
    assert list(marks.get_offsets()[:, 0]) == [h - 2, h - 1]
    assert a2.get_ylim()[1] > marks.get_offsets()[0, 1] > max(max(x for x in r.p99_ms if math.isfinite(x)) for r in day)
    plt.close(fig)


@pytest.mark.server
def test_measure_delay_pair_on_the_course_models(triton):
    rows = M.measure_delay_pair(triton, ["embed", "embed_delay"], concurrency=8, rate=50.0, seconds=0.8)
    assert [(r["model"], r["mode"].split()[0]) for r in rows] == [
        ("embed", "closed"), ("embed", "open"), ("embed_delay", "closed"), ("embed_delay", "open")]
    for r in rows:
        assert r["throughput_rps"] > 0 and r["mean_batch"] >= 1 and r["busy_ms_per_req"] > 0
    assert np.isfinite([r["p99_ms"] for r in rows]).all()
    opens = [r for r in rows if r["mode"].startswith("open")]   # one schedule: the same requests answered
    assert opens[0]["requests"] == opens[1]["requests"] > 0 and all(r["errors"] == 0 for r in rows)
