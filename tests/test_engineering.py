"""batchlab.course.engineering: starvation and queue policies, delay bounds, settings, measured service."""

from __future__ import annotations

import matplotlib
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


def test_busy_seconds_and_measured_service():
    from batchlab.load import ModelStats

    st = ModelStats("m", batches={1: {"compute_input": (2, 1_000_000), "compute_infer": (2, 3_000_000),
                                      "compute_output": (2, 1_000_000)},
                                  4: {"compute_infer": (1, 5_000_000)}})
    assert st.busy_seconds == pytest.approx(0.010)
    svc = E.measured_service({1: 5.0, 2: 6.0, 4: 8.0})
    assert svc.base_us == pytest.approx(4000.0) and svc.per_item_us == pytest.approx(1000.0)
    with pytest.raises(ValueError):
        E.measured_service({1: 5.0})


def test_engineering_plots_draw():
    import matplotlib.pyplot as plt

    from batchlab.course.capacity import cost_from_run, kv_plan_table
    from batchlab.plotting import engineering as P

    tl = [{"t": 0.2 * i, "rps": 10.0, "queue_ms": 1.0, "mean_batch": 2.0, "pending": i, "exec_per_s": 5.0} for i in range(5)]
    runs = E.starvation_experiment(n=2000)
    bound = E.delay_bound_experiment([0.1, 0.5], n=2000)
    plan = kv_plan_table(["Llama-2-7B"], "H100-SXM", [2048, 4096])
    costs = [cost_from_run("a", 1.0, 10, 1.0, 2.0), cost_from_run("b", 1.0, 20, 1.0, 2.0)]
    for fig in (P.plot_metrics_timeline(tl), P.plot_starvation(runs), P.plot_delay_bound(bound),
                P.plot_kv_plan(plan), P.plot_cost(costs)):
        assert fig.axes
        plt.close(fig)


@pytest.mark.server
def test_live_metrics_run_sees_the_load(triton):
    rows, rep = E.live_metrics_run(triton, "embed", [40, 120], seconds_per_phase=0.6, interval=0.15, tail_s=0.3)
    assert rep.n_errors == 0 and rep.n_ok > 20
    assert len(rows) >= 5
    served = [r for r in rows if r["rps"] > 0]
    assert served and all(r["mean_batch"] >= 1 for r in served)
    assert sum(r["rps"] * 0.15 for r in rows) == pytest.approx(rep.n_ok, rel=0.35)
