"""batchlab.course.engineering: starvation and queue policies, delay bounds, settings, measured service."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from batchlab.course import engineering as E

matplotlib.use("Agg")


def test_starvation_policies():
    runs = {r.policy: {row["class"][:3]: row for row in r.rows} for r in E.starvation_experiment(n=6000)}
    hi, lo = "高优先", "低优先"
    # priorities: online is protected, offline starves
    assert runs["priority"][hi]["queue_p99_ms"] < 100
    assert runs["priority"][lo]["queue_p99_ms"] > 20 * runs["priority"][hi]["queue_p99_ms"]
    # the batching delay bounds nothing here
    assert runs["fifo_delay"][lo]["queue_p99_ms"] == pytest.approx(runs["fifo"][lo]["queue_p99_ms"], rel=0.05)
    # a REJECT timeout bounds the wait at the cost of rejections
    assert runs["priority_timeout"][lo]["queue_max_ms"] <= 200.0 + 1e-6
    assert runs["priority_timeout"][lo]["dropped_pct"] > 10
    # DELAY rejects nobody and does not cure starvation
    assert runs["priority_delay_action"][lo]["dropped_pct"] == 0
    assert runs["priority_delay_action"][lo]["queue_p99_ms"] > runs["priority_timeout"][lo]["queue_p99_ms"]
    assert runs["priority_max_queue"][lo]["dropped_pct"] > 10
    # capacity is the cure
    assert runs["priority_2_instances"][lo]["queue_p99_ms"] < 50


def test_delay_bounds_only_the_batching_wait():
    rows = {r["load"]: r for r in E.delay_bound_experiment([0.05, 0.95], delay_ms=5.0, n=6000)}
    assert rows[0.05]["queue_p50_ms"] == pytest.approx(5.0, abs=0.5)
    assert rows[0.05]["over_delay_pct"] < 5
    assert rows[0.95]["over_delay_pct"] > 50 and rows[0.95]["queue_p99_ms"] > 20


def test_online_offline_grid():
    rows = E.online_offline_grid(350, [(8, 0), (64, 0), (64, 20)], n=6000)
    a, b, c = rows
    assert a["p99_ms"] == pytest.approx(b["p99_ms"], rel=0.02)  # delay 0: the cap adds no latency
    assert c["p99_ms"] > b["p99_ms"]            # the delay does
    assert b["capacity_rps"] > a["capacity_rps"]  # offline wants the big cap
    assert c["capacity_rps"] == pytest.approx(b["capacity_rps"], rel=0.01)


def test_busy_seconds_sums_every_batch_phase():
    from batchlab.load import ModelStats

    st = ModelStats("m", batches={1: {"compute_input": (2, 1_000_000), "compute_infer": (2, 3_000_000),
                                      "compute_output": (2, 1_000_000)},
                                  4: {"compute_infer": (1, 5_000_000)}})
    assert st.busy_seconds == pytest.approx(0.010)


def test_engineering_plots_draw():
    """The chapter 06 figures draw the numbers they are given, with their labels."""
    import matplotlib.pyplot as plt
    import numpy as np

    from batchlab.plotting import engineering as P
    from batchlab.theory.kv import kv_plan_table

    def texts(items):
        return [t.get_text() for t in items]

    tl = [{"t": 0.2 * i, "rps": 10.0 + i, "queue_ms": 1.0 + 2 * i, "mean_batch": 2.0 + 0.5 * i, "pending": i,
           "exec_per_s": 5.0} for i in range(5)]
    t = [r["t"] for r in tl]
    fig = P.plot_metrics_timeline(tl)
    a0, a1, a2, twin = fig.axes
    assert fig.get_suptitle() == "从 /metrics 抓到的拼锅现场"
    assert P.plot_metrics_timeline(tl, title="T").get_suptitle() == "T"
    for ax, key, ylabel in ((a0, "rps", "完成请求/s"), (a1, "queue_ms", "排队 ms/请求"), (a2, "mean_batch", "平均批大小"),
                            (twin, "pending", "待处理请求数")):
        (line,) = ax.lines
        np.testing.assert_allclose(line.get_xdata(), t)
        np.testing.assert_allclose(line.get_ydata(), [r[key] for r in tl])
        assert ax.get_ylabel() == ylabel
    assert twin.lines[0].get_drawstyle() == "steps-post"
    assert a2.get_xlabel() == "时间 (s)"
    plt.close("all")

    runs = E.starvation_experiment(n=2000)
    fig = P.plot_starvation(runs, labels={"priority": "只按优先级"})
    by_policy = {r.policy: r for r in runs}
    assert [ax.get_title() for ax in fig.axes] == ["只按优先级", "priority_timeout"]
    assert fig.axes[0].get_ylabel() == "排队等待 (ms)" and all(ax.get_xlabel() == "到达时刻 (s)" for ax in fig.axes)
    for ax, policy in zip(fig.axes, ("priority", "priority_timeout")):
        run = by_policy[policy]
        rec = run.result.records
        dropped = rec["rejected"] | rec["timed_out"]
        points = [c.get_offsets() for c in ax.collections]
        expected = []
        for lev in (1, 2):
            ok = (run.priority == lev) & ~dropped
            expected.append(np.column_stack([rec["arrival"][ok], (rec["start"][ok] - rec["arrival"][ok]) * 1e3]))
            bad = (run.priority == lev) & dropped
            if bad.any():
                expected.append(np.column_stack([rec["arrival"][bad], (rec["finish"][bad] - rec["arrival"][bad]) * 1e3]))
        assert len(points) == len(expected)
        for got, want in zip(points, expected):
            np.testing.assert_allclose(got, want)
    assert dropped.any()  # the timeout policy drops some low-priority requests: they are drawn as x
    assert "被拒绝" in texts(fig.axes[-1].get_legend().get_texts())
    plt.close(fig)

    bound = E.delay_bound_experiment([0.1, 0.5], n=2000)
    fig = P.plot_delay_bound(bound)
    (ax,) = fig.axes
    assert ax.get_title() == "排队延时只管合批等待，不管排队"
    assert ax.get_ylabel() == "排队时间 (ms)" and ax.get_xlabel() == "负载（到达率 / 满批容量）"
    assert len(ax.lines) == 4 and texts(ax.get_legend().get_texts()) == ["p50", "p99", "最长", "排队延时 max_queue_delay"]
    for line, key in zip(ax.lines, ("queue_p50_ms", "queue_p99_ms", "queue_max_ms")):
        np.testing.assert_allclose(line.get_xdata(), [0.1, 0.5])
        np.testing.assert_allclose(line.get_ydata(), [r[key] for r in bound])
    assert list(ax.lines[3].get_ydata()) == [bound[0]["delay_ms"]] * 2
    plt.close(fig)

    plan = kv_plan_table(["Llama-2-7B", "Llama-3-8B"], "H100-SXM", [2048, 4096])
    fig = P.plot_kv_plan(plan)
    (ax,) = fig.axes
    assert ax.get_title() == "H100-SXM: KV Cache 决定并发上限"
    assert ax.get_xlabel() == "每条序列 token 数" and ax.get_ylabel() == "最多并发序列"
    assert texts(ax.get_legend().get_texts()) == ["Llama-2-7B", "Llama-3-8B"]
    for line, model in zip(ax.lines, ("Llama-2-7B", "Llama-3-8B")):
        sub = [r for r in plan if r["model"] == model]
        assert list(line.get_xdata()) == [2048, 4096]
        assert list(line.get_ydata()) == [r["max_sequences"] for r in sub]
    assert texts(ax.texts) == [str(r["max_sequences"]) for r in plan]
    plt.close(fig)



@pytest.mark.server
def test_live_metrics_run_sees_the_load(triton):
    """The windows of the live timeline hold the requests the load sent (merging keeps them all)."""
    rows, rep = E.live_metrics_run(triton, "embed", [40, 120], seconds_per_phase=0.6, interval=0.15, tail_s=1.0)
    assert rep.n_errors == 0 and rep.n_ok > 20
    served = [r for r in rows if r["rps"] > 0]
    assert len(served) >= 3 and min(r["mean_batch"] for r in served) >= 1
    # the first scrape precedes the load; a scrape delayed by a busy machine can only miss requests
    covered = sum(r["rps"] * dt for r, dt in zip(rows, np.diff([0.0] + [r["t"] for r in rows])))
    assert 0.9 * rep.n_ok <= covered <= rep.n_ok + 1e-6


def test_low_excess_pct_is_the_low_class_share_beyond_capacity():
    runs = {r.policy: r for r in E.starvation_experiment(n=6000)}
    cap = E.EMBED_LIKE.throughput(32)
    excess = E.low_excess_pct(runs["priority_timeout"], cap)
    assert 25 < excess < 45                       # stated loads: (0.85 + 0.25 - 1) / 0.25 = 40 %
    dropped = next(r for r in runs["priority_timeout"].rows if r["class"].startswith("低"))["dropped_pct"]
    assert abs(dropped - excess) < 5              # a 200 ms REJECT drops about the excess
    assert E.low_excess_pct(runs["fifo"], 2 * cap) < 0   # room to spare: no excess
