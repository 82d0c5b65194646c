"""batchlab.course.seed_redo: the article's demo redone in the event-driven simulator."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from batchlab.course import seed_redo as R
from batchlab.course import seed_demo as sd

matplotlib.use("Agg")


def test_demo_cost_is_the_articles_service_model():
    # one request of L tokens alone takes L / 10 s; a batch takes max(L) / 10 s whatever its size
    rows = {r["scheduler"]: r for r in R.redo(np.array([0.0]), np.array([20]), 4, 0.0)}
    assert rows["naive"]["mean_s"] == pytest.approx(2.0)
    rows = {r["scheduler"]: r for r in R.redo(np.zeros(4), np.array([5, 5, 5, 50]), 4, 0.0, schedulers=("naive", "seq"))}
    assert rows["naive"]["mean_s"] == pytest.approx(5.0)
    assert rows["seq"]["mean_s"] == pytest.approx((3 * 0.5 + 5.0) / 4)
    with pytest.raises(ValueError, match="unknown scheduler"):
        R.redo(np.zeros(1), np.ones(1, int), 1, 0.0, schedulers=("x",))


def test_workload_from_trace_is_the_articles_requests():
    tr = sd.trace_sim(4, 3.0, True)
    a, L = R.workload_from_trace(tr)
    assert a.size == L.size == len(tr.arrivals) == 29
    assert L.min() >= 5 and L.max() <= 50


@pytest.mark.slow
def test_redo_same_requests_and_steady_state():
    a, L = R.workload_from_trace(sd.trace_sim(4, 3.0, True))
    rows = {r["scheduler"]: r for r in R.redo(a, L, 4, 3.0)}
    assert rows["naive"]["n"] == rows["seq"]["n"] == rows["continuous"]["n"] == 29   # nobody left out
    assert rows["continuous"]["mean_s"] < rows["seq"]["mean_s"] < rows["naive"]["mean_s"]
    A, LL = R.article_workload(6000, seed=1)
    b2 = {r["scheduler"]: r for r in R.redo(A, LL, 2, 1.0, warmup=0.1)}
    assert not b2["naive"]["stable"] and not b2["seq"]["stable"] and b2["continuous"]["stable"]
    b4 = {r["scheduler"]: r for r in R.redo(A, LL, 4, 3.0, cost=R.BATCH_COST, warmup=0.1)}
    assert all(r["stable"] for r in b4.values())
    assert b4["continuous"]["eta"] == pytest.approx(1.0) and b4["naive"]["eta"] < 0.8


def test_demo_plot_helpers():
    import matplotlib.pyplot as plt

    from batchlab.plotting import demo as P
    from batchlab.sim import simulate_continuous

    tr = sd.trace_sim(4, 3.0, True)
    t, run, wait = P.trace_occupancy(tr)
    assert t.size == tr.ticks and run.max() <= 4 and wait.min() >= 0
    a, L = R.workload_from_trace(tr)
    res = simulate_continuous(a, np.ones_like(L), L, R.ARTICLE_COST, max_active=4)
    t2, run2, wait2 = P.sim_occupancy(res, np.arange(0, 40, 0.5))
    assert run2.max() <= 4
    fig = P.plot_slots([("a", t, run, wait), ("b", t2, run2, wait2)], capacity=4)
    assert len(fig.axes) == 2
    assert [ax.get_title() for ax in fig.axes] == ["a", "b"]
    assert all(ax.get_ylabel() == "请求数" for ax in fig.axes) and fig.axes[-1].get_xlabel() == "时间 (s)"
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["锅里（运行中）", "门口排队", "锅容量"]
    for ax, (tt, rr, ww) in zip(fig.axes, ((t, run, wait), (t2, run2, wait2))):
        queue_line, cap_line = ax.lines
        np.testing.assert_allclose(queue_line.get_xdata(), tt)
        np.testing.assert_array_equal(queue_line.get_ydata(), ww)
        assert queue_line.get_drawstyle() == "steps-post"
        assert list(cap_line.get_ydata()) == [4, 4]
        (running,) = ax.collections  # fill_between: the running requests, up to their count
        top = running.get_paths()[0].vertices[:, 1]
        assert top.max() == rr.max() and top.min() == 0
    plt.close(fig)
