"""batchlab.course.cases: the article's case studies, closed forms and simulated re-creations."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest

from batchlab.course import cases as C
from batchlab.sim import workload as W
from batchlab.sim.dynamic import simulate_dynamic
from batchlab.sim.service import Affine
from batchlab.theory import formulas as F

matplotlib.use("Agg")


def test_article_figures_are_kept_verbatim():
    assert C.ECOMMERCE == {"rate_qps": 5000.0, "max_batch_size": 8, "max_queue_delay_ms": 50.0,
                           "p95_before_s": 6.0, "p95_after_s": 2.0, "util_before": 0.22, "util_after": 0.67}
    assert len(C.TENANTS) == 12
    assert sum(t.share for t in C.TENANTS) == pytest.approx(1.0)


def test_closed_forms():
    assert C.fill_time_s(8, 5000) == pytest.approx(0.0014)  # 7 arrivals after the oldest
    assert C.fill_time_s(1, 5000) == 0.0
    n = C.replicas_where_delay_matters(5000, 8, 0.05)
    assert n == pytest.approx(250 / 7)
    assert C.fill_time_s(8, 5000 / n) == pytest.approx(0.05)  # at the threshold a replica fills in 50 ms
    assert C.replicas_where_delay_matters(5000, 1, 0.05) == math.inf
    assert F.littles_law_l(5000, 2.0) == 10_000
    assert F.instances_needed(5000, 8, 2.0) == 1250
    assert F.instances_needed(5000, 8, 2.0, busy=0.67) == math.ceil(1250 / 0.67)
    r = C.overhead_ratio(0.22)
    assert r == pytest.approx(0.78 / 0.22)
    assert C.kernel_share(1, r) == pytest.approx(0.22)
    assert C.kernel_share(8, r) == pytest.approx(8 / (r + 8))
    b = C.batch_for_share(0.67, r)
    assert C.kernel_share(b, r) == pytest.approx(0.67)
    assert F.affine_speedup(1, r, 1) == pytest.approx(1.0)
    assert F.affine_speedup(b, r, 1) == pytest.approx(0.67 / 0.22)  # util ∝ throughput per GPU
    assert C.compute_utilisation_at_batch(8, 295) == pytest.approx(8 / 295)
    assert C.compute_utilisation_at_batch(1000, 295) == 1.0


def test_fill_time_is_the_age_the_delay_clock_reads():
    """The course's Triton batcher, a long delay, an always idle instance: each batch of 8 leaves
    when its 8th request arrives, and its oldest request has then waited (8 − 1)/λ, not 8/λ."""
    arr = W.poisson(5000.0, 16_000, seed=np.random.default_rng(1))
    res = simulate_dynamic(arr, Affine(1.0, 0.0), max_batch_size=8, max_queue_delay_us=50_000, warmup=0)
    rec = res.records
    assert set(res.batches["size"]) == {8}
    first = np.unique(rec["batch_id"], return_index=True)[1]
    oldest_wait = rec["start"][first] - rec["arrival"][first]
    assert oldest_wait.mean() == pytest.approx(C.fill_time_s(8, 5000), rel=0.03)
    assert oldest_wait.mean() < 0.9 * 8 / 5000


@pytest.mark.parametrize("call", [
    lambda: C.fill_time_s(0, 1.0), lambda: C.replicas_where_delay_matters(1.0, 8, 0.0),
    lambda: F.instances_needed(1.0, 8, 1.0, busy=0.0), lambda: C.overhead_ratio(0.5, busy=0.4),
    lambda: C.batch_for_share(1.0, 3.0), lambda: C.compute_utilisation_at_batch(0, 1.0),
])
def test_closed_forms_reject_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_fleet_size_follows_from_utilisation_alone():
    a = C.EcommerceAssumptions()
    # N_GPU = λ · b / U, whatever the busy level assumed
    for busy in (0.9, 0.97, 0.99):
        x = C.EcommerceAssumptions(busy_before=busy)
        assert x.nodes_before * x.gpus_per_node == pytest.approx(5000 * 0.1 / 0.22)
    assert a.service.base_us == pytest.approx(a.ratio * 100_000)


def test_ecommerce_utilisation_needs_a_smaller_fleet():
    rows = {r["scenario"]: r for r in C.ecommerce_scenarios(C.EcommerceAssumptions(n_requests=6000))}
    assert set(rows) == {"before", "after_same_fleet", "after_third_fleet"}
    assert rows["before"]["gpu_util"] == pytest.approx(0.22, abs=0.02)
    # same traffic, same fleet: batching cannot raise the kernel share of wall time
    assert rows["after_same_fleet"]["gpu_util"] == pytest.approx(rows["before"]["gpu_util"], abs=0.02)
    assert rows["after_same_fleet"]["busy"] < rows["before"]["busy"]
    assert rows["after_third_fleet"]["gpu_util"] == pytest.approx(0.67, abs=0.03)
    assert rows["after_third_fleet"]["mean_batch"] > 5
    assert rows["after_third_fleet"]["gpus"] == pytest.approx(rows["before"]["gpus"] * 0.22 / 0.67)


def test_before_p95_grows_towards_saturation():
    rows = C.before_p95_sweep([0.9, 0.99], C.EcommerceAssumptions(n_requests=8000))
    assert rows[0]["p95_s"] < rows[1]["p95_s"]


def test_padding_eta_by_hand():
    # batch of 2: (p, o) = (1, 1) and (1, 3) -> useful 1 + 3, padded 2 · (1 + 3 − 1)
    assert C.padding_eta(np.array([1, 1]), np.array([1, 3]), 2) == pytest.approx(4 / 6)
    assert C.padding_eta(np.array([5, 5, 5, 5]), np.array([7, 7, 7, 7]), 2) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        C.padding_eta(np.array([1]), np.array([1]), 2)


def test_tenant_requests_follow_the_shares():
    arr, p, o, who = C.tenant_requests(C.TENANTS, 10.0, 30_000, seed=1)
    assert np.all(np.diff(arr) >= 0) and p.min() >= 1 and o.min() >= 1
    freq = np.bincount(who, minlength=len(C.TENANTS)) / who.size
    assert np.allclose(freq, [t.share for t in C.TENANTS], atol=0.01)
    with pytest.raises(ValueError):
        C.tenant_requests((), 1.0, 10)


def test_saas_continuous_removes_padding_and_adds_capacity():
    rows = {r["scheduler"]: r for r in C.saas_comparison(2.0, n=1500)}
    assert rows["continuous"]["eta"] == pytest.approx(1.0)
    assert rows["static"]["eta"] < 0.5
    cap = C.saas_capacity(n=800)
    assert cap["continuous"] > 3 * cap["static"]


def test_fairness_short_requests_stop_waiting_for_long_ones():
    rows = {(r["scheduler"], r["tenant"]): r for r in C.fairness_experiment(n=1500)}
    assert rows[("static", "短单")]["p99_s"] > 3 * rows[("continuous", "短单")]["p99_s"]
    assert rows[("continuous", "短单")]["p99_s"] < rows[("continuous", "长单")]["p99_s"]
    with pytest.raises(ValueError, match="unknown scheduler"):
        C.fairness_experiment(n=100, schedulers=("magic",))


def test_per_group_latency_checks_lengths():
    from batchlab.sim import Affine, simulate_dynamic

    res = simulate_dynamic(np.arange(10) * 0.1, Affine(1000, 100), max_batch_size=4)
    with pytest.raises(ValueError):
        C.per_group_latency(res, np.zeros(3), ["a"])
    rows = C.per_group_latency(res, np.array([0, 1] * 5), ["a", "b"], warmup=0.0)
    assert [r["n"] for r in rows] == [5, 5]


def test_text_table_formats_and_aligns():
    out = C.text_table([{"名字": "短单", "x": 0.012345, "ok": True, "n": 12345, "none": None},
                        {"名字": "a", "x": 1234.5, "ok": False, "n": 1, "none": None}])
    lines = out.splitlines()
    assert "0.0123" in out and "1,234" in out and "是" in out and "否" in out and "—" in out and "12,345" in out
    assert len(lines) == 4
    assert C.text_table([]) == "(no rows)"


def test_case_plots_draw():
    """The case figures draw the numbers they are given, with their labels and the article's marks."""
    import matplotlib.pyplot as plt

    from batchlab.plotting import cases as P

    def texts(items):
        return [t.get_text() for t in items]

    rows = [{"scenario": "before", "p95_s": 2.0, "gpu_util": 0.22}, {"scenario": "after", "p95_s": 1.0, "gpu_util": 0.6}]
    fig = P.plot_ecommerce(rows, C.ECOMMERCE, labels={"before": "改造前"})
    a0, a1 = fig.axes
    assert a0.get_ylabel() == "p95 延迟 (s)" and a1.get_ylabel() == "GPU 利用率 (%)"
    assert [b.get_height() for b in a0.patches] == [2.0, 1.0]
    assert [b.get_height() for b in a1.patches] == pytest.approx([22.0, 60.0])
    assert texts(a0.get_xticklabels()) == texts(a1.get_xticklabels()) == ["改造前", "after"]
    # the article's before/after figures as dashed horizontal lines
    assert [ln.get_ydata()[0] for ln in a0.lines] == [C.ECOMMERCE["p95_before_s"], C.ECOMMERCE["p95_after_s"]]
    assert [ln.get_ydata()[0] for ln in a1.lines] == pytest.approx(
        [100 * C.ECOMMERCE["util_before"], 100 * C.ECOMMERCE["util_after"]])
    assert all(ln.get_linestyle() == "--" for ln in a0.lines + a1.lines)
    assert texts(a0.texts) == ["文章：改造前", "文章：改造后"] and texts(a1.texts) == ["文章：22%", "文章：67%"]
    plt.close(fig)

    cells = [("static", "短单"), ("static", "长单"), ("continuous", "短单"), ("continuous", "长单")]
    fig = P.plot_fairness([{"scheduler": s, "tenant": t, "p99_s": 1.0 + i} for i, (s, t) in enumerate(cells)],
                          labels={"static": "补齐批"})
    (ax,) = fig.axes
    assert ax.get_title() == "短单与长单同锅：各租户的 p99" and ax.get_ylabel() == "p99 延迟 (s)"
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    assert texts(ax.get_xticklabels()) == ["补齐批", "continuous"]
    assert texts(ax.get_legend().get_texts()) == ["短单", "长单"]
    # one bar per (tenant, scheduler), tenant by tenant; each labelled with its value
    assert [b.get_height() for b in ax.patches] == [1.0, 3.0, 2.0, 4.0]
    assert [round(b.get_x() + b.get_width() / 2, 6) for b in ax.patches] == [-0.2, 0.8, 0.2, 1.2]
    assert texts(ax.texts) == ["1", "3", "2", "4"]
    plt.close(fig)

    b = np.linspace(1, 16, 16)
    fig = P.plot_utilisation_readings(b, 3.5, 295, C.ECOMMERCE)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "平均批大小 B" and ax.get_ylabel() == "GPU 利用率 (%)"
    assert len(ax.lines) == 4  # two readings + the article's two marks
    np.testing.assert_allclose(ax.lines[0].get_xdata(), b)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), 100 * b / (3.5 + b))
    np.testing.assert_allclose(ax.lines[1].get_ydata(), 100 * np.minimum(1, b / 295))
    assert [ln.get_ydata()[0] for ln in ax.lines[2:]] == pytest.approx(
        [100 * C.ECOMMERCE["util_before"], 100 * C.ECOMMERCE["util_after"]])
    assert texts(ax.get_legend().get_texts()) == ["读法 A：内核时间占比 B/(r+B)，r=3.50", "读法 B：算力利用率 B/295"]
    assert ax.get_xlim() == (1.0, 16.0)
    plt.close(fig)


@pytest.mark.server
def test_real_fairness_runs_on_the_course_models(triton):
    rows = C.real_fairness(triton, seconds=1.5, rate_short=4.0, rate_long=0.7, long=(40, 40))
    assert {(r["model"], r["tenant"]) for r in rows} == {
        (m, t) for m in ("generate", "lm_stream") for t in ("短单", "长单")}
    assert all(r["errors"] == 0 for r in rows)
    assert sum(r["n"] for r in rows if r["model"] == "generate") == sum(r["n"] for r in rows if r["model"] == "lm_stream")
