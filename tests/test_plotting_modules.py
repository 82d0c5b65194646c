"""batchlab.plotting, chapters 01–05: each figure draws exactly the numbers it is given.

One test per public function of plotting.tuning, padding, evaluation, speedup, timeline and
bottleneck, called with small seeded inputs like the notebooks pass: the data drawn (lines, bars,
points, value labels) against the inputs, marks inside the axes, and no legend over data. Axis
labels, titles, colours and legend strings are the notebooks' to show, not asserted here.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)
from matplotlib.colors import LogNorm  # noqa: E402

from batchlab.plotting import bottleneck as BN  # noqa: E402
from batchlab.plotting import evaluation as EV  # noqa: E402
from batchlab.plotting import padding as PP  # noqa: E402
from batchlab.plotting import speedup as SP  # noqa: E402
from batchlab.plotting import timeline as TL  # noqa: E402
from batchlab.plotting import tuning as TP  # noqa: E402
from batchlab.plotting import cjk_available  # noqa: E402
from batchlab.sim import Affine, simulate_dynamic  # noqa: E402
from batchlab.sim.workload import poisson  # noqa: E402
from batchlab.theory import formulas as F  # noqa: E402
from plotting_check import assert_clean  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    assert cjk_available(), "a CJK font is installed: the labels below are the Chinese ones"
    yield
    plt.close("all")


def texts(items) -> list[str]:
    return [t.get_text() for t in items]


def assert_inside(ax, x, y) -> None:
    """The finite points (x, y) lie inside the axes limits (either direction)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    assert np.all((x0 <= x[ok]) & (x[ok] <= x1)), (x[ok], (x0, x1))
    assert np.all((y0 <= y[ok]) & (y[ok] <= y1)), (y[ok], (y0, y1))


def assert_lines_inside(ax) -> None:
    for ln in ax.lines:
        assert_inside(ax, ln.get_xdata(), ln.get_ydata())


# ----------------------------------------------------------------------------- tuning (chapter 04)


def test_plot_wait_vs_load_draws_curves_then_points():
    rng = np.random.default_rng(40)
    rates = np.array([20.0, 60.0, 100.0, 140.0])
    md1, chain, bound = (np.sort(rng.uniform(1, 50, 4)) for _ in range(3))
    sim = chain * rng.uniform(0.9, 1.1, 4)
    curves = {"不拼批 M/D/1": md1, "max_batch_size=16（批服务链，精确）": chain, "不限批大小（闭式上界）": bound}
    ax = TP.plot_wait_vs_load(rates, curves, {"模拟 max_batch_size=16": sim})
    assert len(ax.lines) == 4
    for ln, y in zip(ax.lines, [md1, chain, bound, sim]):
        np.testing.assert_allclose(ln.get_xdata(), rates)
        np.testing.assert_allclose(ln.get_ydata(), y)
    assert_lines_inside(ax)
    assert_clean(ax)

    # the chapter's call: its own labels, linear axis, no simulated points
    ax = TP.plot_wait_vs_load(rates, {"a": md1}, xlabel="到达率 λ（req/s）", ylabel="平均延迟（ms）", logy=False)
    assert len(ax.lines) == 1


def test_plot_heatmap_writes_each_cell_where_it_belongs():
    xs, ys = [0.0, 500.0, 1000.0, 2000.0], [1, 4, 16]          # max_queue_delay_us (float), max_batch_size
    z = np.arange(1.0, 13.0).reshape(3, 4) * 7.5                 # z[y, x], all distinct
    z[2, 3] = np.nan
    ax = TP.plot_heatmap(xs, ys, z, "轻载 60 req/s：p99 (ms)", fmt="{:.1f}")
    assert texts(ax.get_xticklabels()) == ["0", "0.5", "1", "2"]   # µs shown in ms
    (im,) = ax.images
    data = im.get_array()
    np.testing.assert_allclose(data.filled(np.nan), z)
    assert data.mask[2, 3] and data.mask.sum() == 1
    assert not isinstance(im.norm, LogNorm)
    # one label per finite cell, at column j / row i, holding z[i, j]
    assert len(ax.texts) == 11
    for t in ax.texts:
        j, i = t.get_position()
        assert t.get_text() == f"{z[int(i), int(j)]:.1f}"
    assert len(ax.figure.axes) == 2                                # heatmap + colorbar
    assert_clean(ax)

    # the heavy-load call: log colours and a cap: cells above vmax read ">cap"
    z2 = np.array([[5.0, 50.0], [500.0, 5000.0]])
    ax = TP.plot_heatmap([0.0, 1000.0], [8, 32], z2, "重载", log=True, vmax=1000, fmt="{:.0f}")
    (im,) = ax.images
    assert isinstance(im.norm, LogNorm) and (im.norm.vmin, im.norm.vmax) == (5.0, 1000.0)
    assert texts(ax.texts) == ["5", "50", "500", ">1000"]
    assert_clean(ax)
    assert not ax.patches


def test_plot_slo_capacity_marks_the_tie_band_and_the_choice():
    labels = ["B=8 d=0us", "B=16 d=0us", "B=8 d=1000us", "B=4 d=0us"]
    rates = [419.0, 421.0, 418.0, 300.0]
    ax = TP.plot_slo_capacity(labels, rates, tie=0.02, title="p95 ≤ 30 ms")
    color_at = {round(b.get_y() + b.get_height() / 2): b.get_facecolor() for b in ax.patches}
    assert sorted(b.get_width() for b in ax.patches) == sorted(rates)
    # the simplest config within 2 % of the best is chosen (B=8 d=0us), the rest of the band marked apart
    assert color_at[1] == color_at[2] != color_at[0] and color_at[3] not in (color_at[0], color_at[1])
    assert texts(ax.texts) == [" 419", " 421", " 418", " 300"]
    assert [t.xy for t in ax.texts] == [(r, i) for i, r in enumerate(rates)]
    assert max(rates) <= ax.get_xlim()[1] and ax.get_title() == "p95 ≤ 30 ms"
    assert_clean(ax)


# ----------------------------------------------------------------------------- padding (chapter 03)


def test_plot_padded_batch_real_tokens_and_padding():
    lengths = [5, 12, 8, 3]
    ax = PP.plot_padded_batch(lengths)
    real, pad = ax.patches[:4], ax.patches[4:]
    assert len(ax.patches) == 8
    assert [b.get_width() for b in real] == lengths and all(b.get_x() == 0 for b in real)
    assert [b.get_x() for b in pad] == lengths and [b.get_width() for b in pad] == [7, 0, 4, 9]
    assert ax.get_xlim()[1] >= 12
    assert_clean(ax)


def test_plot_kv_per_token_log_bars_in_kib_and_mib():
    names, v = ["Llama-2-7B", "Llama-3-8B", "tiny"], [524288.0, 131072.0, 4096.0]
    ax = PP.plot_kv_per_token(names, v)
    assert [b.get_width() for b in ax.patches] == v
    assert texts(ax.texts) == [" 524,288 B = 512 KiB = 0.5 MiB", " 131,072 B = 128 KiB", " 4,096 B = 4 KiB"]
    assert ax.get_xlim() == pytest.approx((2048.0, 524288.0 * 15))
    assert_clean(ax)


def test_plot_kv_layouts_one_step_line_per_layout_over_the_diagonal():
    held = [8, 9, 16, 17, 33]
    slots = {"contiguous": [16, 16, 16, 32, 64], "paged": [16, 16, 16, 32, 48], "reserve": [80] * 5}
    labels = {"contiguous": "连续数组", "paged": "块池·按需", "reserve": "块池·预留"}
    ax = PP.plot_kv_layouts(held, slots, labels)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), held)               # the diagonal
    for ln, key in zip(ax.lines[1:], labels):
        np.testing.assert_allclose(ln.get_xdata(), held)
        np.testing.assert_allclose(ln.get_ydata(), slots[key])
    assert ax.get_ylim()[0] == 0
    assert_lines_inside(ax)
    assert_clean(ax)


def test_plot_concurrency_vs_context_log_log():
    ctx = [512, 1024, 2048, 4096, 8192]
    series = {"Llama-2-7B": [120, 60, 30, 15, 7], "Llama-3-8B": [480, 240, 120, 60, 30]}
    ax = PP.plot_concurrency_vs_context(ctx, series)
    assert len(ax.lines) == 2
    assert_clean(ax)
    for ln, y in zip(ax.lines, series.values()):
        np.testing.assert_allclose(ln.get_xdata(), ctx)
        np.testing.assert_allclose(ln.get_ydata(), y)
    assert_lines_inside(ax)


def test_plot_concurrency_vs_context_marks_rows_beyond_the_context():
    ctx = [1024, 4096, 8192, 16384]
    series = {"Llama-2-7B": [200, 50, 25, 12], "Llama-3-8B": [800, 200, 100, 50]}
    ax = PP.plot_concurrency_vs_context(ctx, series, context_len={"Llama-2-7B": 4096, "Llama-3-8B": 8192})
    solid = [ln for ln in ax.lines if ln.get_linestyle() == "-"]
    dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert [list(ln.get_xdata()) for ln in solid] == [[1024, 4096], [1024, 4096, 8192]]
    assert [list(ln.get_xdata()) for ln in dashed] == [[4096, 8192, 16384], [8192, 16384]]
    assert_clean(ax)


# ----------------------------------------------------------------------------- evaluation (chapter 05)


def test_plot_percentiles_measured_then_simulated_on_one_axes():
    rng = np.random.default_rng(50)
    thr = np.sort(rng.uniform(50, 400, 5))
    pcts = {f"p{q}": np.sort(rng.uniform(5, 20, 5)) * q / 50 for q in (50, 95, 99)}
    ax = EV.plot_percentiles(thr, pcts, label_suffix=" 实测")
    sim_thr = thr * 1.02
    sim = {k: v * 0.9 for k, v in pcts.items()}
    assert EV.plot_percentiles(sim_thr, sim, ax=ax, style="x--", label_suffix=" 模拟") is ax
    for ln, (x, y) in zip(ax.lines, [(thr, v) for v in pcts.values()] + [(sim_thr, v) for v in sim.values()]):
        np.testing.assert_allclose(ln.get_xdata(), x)
        np.testing.assert_allclose(ln.get_ydata(), y)
    assert_lines_inside(ax)
    assert_clean(ax)

    ax = EV.plot_percentiles([0.1, 0.5, 0.9], {"模拟 p99": [1, 2, 9]}, xlabel="负载 ρ = λ / 满批容量")
    assert ax.get_xlabel() == "负载 ρ = λ / 满批容量"


def test_plot_latency_vs_length_one_scatter_per_scheme():
    rng = np.random.default_rng(51)
    lengths = {"补齐": rng.integers(1, 100, 40), "连续批处理": rng.integers(1, 100, 30)}
    latency = {"补齐": rng.uniform(100, 900, 40), "连续批处理": 8.0 * lengths["连续批处理"]}
    ax = EV.plot_latency_vs_length(lengths, latency)
    assert len(ax.collections) == 2
    for coll, name in zip(ax.collections, latency):
        np.testing.assert_allclose(coll.get_offsets(), np.column_stack([lengths[name], latency[name]]))
    for name in latency:
        assert_inside(ax, lengths[name], latency[name])
    assert_clean(ax)


def test_plot_amdahl_fit_affine_ceiling_ideal():
    sizes = np.array([1, 2, 4, 8, 16, 32, 64])
    a_ms, b_ms = 2.0, 0.25
    f = F.amdahl_f_from_affine(a_ms, b_ms)
    measured = F.affine_speedup(sizes, a_ms, b_ms) * np.random.default_rng(52).uniform(0.95, 1.05, sizes.size)
    ax = EV.plot_amdahl(sizes, measured, f, b_max=512)
    ceiling = F.amdahl_ceiling(f)
    pts, fit, top, ideal = ax.lines
    np.testing.assert_allclose(pts.get_xdata(), sizes)
    np.testing.assert_allclose(pts.get_ydata(), measured)
    grid = fit.get_xdata()
    np.testing.assert_allclose(grid, np.geomspace(1, 512, 200))
    np.testing.assert_allclose(fit.get_ydata(), [F.amdahl(f, g) for g in grid])
    np.testing.assert_allclose(top.get_ydata(), [ceiling, ceiling])
    np.testing.assert_allclose(ideal.get_ydata(), grid)
    assert ax.get_ylim() == pytest.approx((0.8, max(ceiling * 1.4, measured.max() * 1.3)))
    assert_inside(ax, sizes, measured)
    assert_inside(ax, grid, fit.get_ydata())
    assert_clean(ax)

    ax = EV.plot_amdahl(sizes, measured, f)                      # grid to 4·max B
    assert len(ax.lines) == 4 and ax.lines[1].get_xdata()[-1] == pytest.approx(4 * 64)


def test_plot_batch_time_points_and_fit():
    sizes = np.array([1, 2, 4, 8, 16])
    a_ms, b_ms = 3.1, 0.42
    t_ms = F.affine_batch_time(sizes, a_ms, b_ms) + np.random.default_rng(53).normal(0, 0.05, 5)
    ax = EV.plot_batch_time(sizes, t_ms, a_ms, b_ms)
    pts, fit = ax.lines
    np.testing.assert_allclose(pts.get_xdata(), sizes)
    np.testing.assert_allclose(pts.get_ydata(), t_ms)
    np.testing.assert_allclose(fit.get_xdata(), np.linspace(0, 16, 50))
    np.testing.assert_allclose(fit.get_ydata(), F.affine_batch_time(fit.get_xdata(), a_ms, b_ms))
    assert_lines_inside(ax)
    assert_clean(ax)


# ----------------------------------------------------------------------------- speedup (chapter 02)


def test_plot_batch_times_points_range_fit_and_one_by_one():
    sizes = [1, 2, 4, 8, 16]
    a_ms, b_ms = 1.8, 0.3
    rng = np.random.default_rng(20)
    t_ms = F.affine_batch_time(np.array(sizes), a_ms, b_ms) * rng.uniform(0.97, 1.03, 5)
    lo, hi = t_ms * 0.9, t_ms * 1.2
    _, ax = plt.subplots()
    SP.plot_batch_times(ax, sizes, t_ms, a_ms, b_ms, lo=lo, hi=hi, label="实测 t(B)（最快一轮）")
    pts, fit, serial = ax.lines
    np.testing.assert_allclose(pts.get_xdata(), sizes)
    np.testing.assert_allclose(pts.get_ydata(), t_ms)
    xs = np.linspace(0, 16 * 1.05, 100)
    np.testing.assert_allclose(fit.get_xdata(), xs)
    np.testing.assert_allclose(fit.get_ydata(), F.affine_batch_time(xs, a_ms, b_ms))
    np.testing.assert_allclose(serial.get_ydata(), (a_ms + b_ms) * xs)
    (rng_bars,) = ax.collections
    seg = np.array(rng_bars.get_segments())
    np.testing.assert_allclose(seg[:, :, 0], np.column_stack([sizes, sizes]))
    np.testing.assert_allclose(seg[:, :, 1], np.column_stack([lo, hi]))
    assert ax.get_xlim() == pytest.approx((0, 16.8)) and ax.get_ylim()[0] == 0
    assert_inside(ax, sizes, hi)
    assert_inside(ax, sizes, t_ms)
    assert_clean(ax)

    _, ax = plt.subplots()
    SP.plot_batch_times(ax, sizes, t_ms, a_ms, b_ms)
    assert not ax.collections
    with pytest.raises(ValueError):
        SP.plot_batch_times(ax, sizes, t_ms[:3], a_ms, b_ms)


def test_plot_speedup_derived_ceiling_ideal_and_points():
    sizes = [1, 2, 4, 8, 16, 32]
    a_ms, b_ms = 2.4, 0.6
    rng = np.random.default_rng(21)
    derived = F.affine_speedup(np.array(sizes), a_ms, b_ms)
    measured = derived * rng.uniform(0.9, 1.0, 6)
    _, ax = plt.subplots()
    SP.plot_speedup(ax, sizes, a_ms, b_ms, measured=measured)
    ceiling = (a_ms + b_ms) / b_ms
    curve, top, ideal, meas = ax.lines
    xs = np.linspace(1, 32, 200)
    np.testing.assert_allclose(curve.get_xdata(), xs)
    np.testing.assert_allclose(curve.get_ydata(), F.affine_speedup(xs, a_ms, b_ms))
    np.testing.assert_allclose(top.get_ydata(), [ceiling, ceiling])
    np.testing.assert_allclose(ideal.get_ydata(), xs)
    np.testing.assert_allclose(meas.get_ydata(), measured)
    pad = 0.04 * 31                                              # the end points' markers stay whole
    assert ax.get_xlim() == pytest.approx((1 - pad, 32 + pad)) and ax.get_ylim() == pytest.approx((0, ceiling * 1.3 * 1.08))
    for ln in (curve, meas):
        assert_inside(ax, ln.get_xdata(), ln.get_ydata())
    assert_clean(ax)

    _, ax = plt.subplots()                                       # b = 0: no ceiling, linear speedup
    SP.plot_speedup(ax, [1, 8, 64], 1.0, 0.0)
    assert len(ax.lines) == 2 and ax.get_xlim() == pytest.approx((1 - 0.04 * 63, 64 + 0.04 * 63))
    np.testing.assert_allclose(ax.lines[0].get_ydata(), np.linspace(1, 64, 200))


@pytest.mark.parametrize("t_single, b_batch, t_batch, max_b", [(10.0, 3, 18.0, 12), (8.0, 2, 11.0, 6)])
def test_plot_hotpot_example_minutes_per_dish(t_single, b_batch, t_batch, max_b):
    _, ax = plt.subplots()
    SP.plot_hotpot_example(ax, t_single, b_batch, t_batch, max_b)
    b = (t_batch - t_single) / (b_batch - 1)
    a = t_single - b
    xs = np.arange(1, max_b + 1)
    assert len(ax.patches) == max_b
    np.testing.assert_allclose([p.get_height() for p in ax.patches], (a + b * xs) / xs)
    assert ax.patches[0].get_height() == pytest.approx(t_single)
    assert ax.patches[b_batch - 1].get_height() == pytest.approx(t_batch / b_batch)
    (floor,) = ax.lines
    np.testing.assert_allclose(floor.get_ydata(), [b, b])
    assert list(ax.get_xticks()) == list(xs)
    assert ax.get_ylim()[1] >= t_single
    assert_clean(ax)


# ----------------------------------------------------------------------------- timeline (chapters 00, 02)


def _small_sim():
    arrivals = poisson(400.0, 14, seed=11)
    return simulate_dynamic(arrivals, Affine(base_us=3000, per_item_us=1000), 4, max_queue_delay_us=2000)


def test_plot_timeline_rows_in_arrival_order():
    res = _small_sim()
    rec, bat = res.records, res.batches
    perm = np.random.default_rng(12).permutation(len(res))        # requests given out of order
    a, s, f, bid = (np.asarray(rec[k])[perm] for k in ("arrival", "start", "finish", "batch_id"))
    s[3] = f[3] = np.nan                                          # one request that never ran
    _, ax = plt.subplots()
    TL.plot_timeline(ax, a, s, f, bid, bat["start"], bat["end"], delay_s=0.002, title="前几锅")
    n = len(res)
    order = np.argsort(a, kind="stable")
    assert len(ax.lines) == 3 * n - 1 + 1                          # wait, arrival tick, run bar; one skipped; window
    assert len(ax.patches) == bat.size                             # one shaded column per execution
    for k, p in enumerate(ax.patches):
        xs = p.get_xy()[:, 0] if hasattr(p.get_xy(), "shape") else [p.get_x(), p.get_x() + p.get_width()]
        assert (min(xs), max(xs)) == pytest.approx((bat["start"][k] * 1e3, bat["end"][k] * 1e3))
    runs = [ln for ln in ax.lines if ln.get_linewidth() == 6]
    assert len(runs) == n - 1
    expected_runs = [(row, i) for row, i in enumerate(order) if i != 3]
    for ln, (row, i) in zip(runs, expected_runs):
        np.testing.assert_allclose(ln.get_xdata(), [s[i] * 1e3, f[i] * 1e3])
        np.testing.assert_allclose(ln.get_ydata(), [row, row])
    waits = [ln for ln in ax.lines[:-1] if ln.get_linewidth() == 1.0 and ln.get_marker() == "None"]   # not the window
    assert len(waits) == n
    for ln, (row, i) in zip(waits, enumerate(order)):
        np.testing.assert_allclose(ln.get_xdata(), [a[i] * 1e3, s[i] * 1e3])
        assert list(ln.get_ydata()) == [row, row]
    window = ax.lines[-1]
    np.testing.assert_allclose(window.get_xdata(), [a.min() * 1e3 + 2.0] * 2)
    for ln in runs + waits:
        assert_inside(ax, ln.get_xdata(), ln.get_ydata())
    assert_clean(ax)

    _, ax = plt.subplots()                                        # seconds, no batches, no window
    TL.plot_timeline(ax, a, s, f, bid, unit="s")
    assert ax.get_legend() is None and not ax.patches
    np.testing.assert_allclose(ax.lines[0].get_xdata(), [a[order[0]], s[order[0]]])
    with pytest.raises(ValueError):
        TL.plot_timeline(ax, a, s, f, bid, unit="us")
    with pytest.raises(ValueError):
        TL.plot_timeline(ax, a, s[:-1], f, bid)


def test_plot_sim_timeline_reads_the_result_and_its_delay():
    res = _small_sim()
    r, b = res.records, res.batches
    _, ax = plt.subplots()
    TL.plot_sim_timeline(ax, res, title="burst")
    order = np.argsort(r["arrival"], kind="stable")
    runs = [ln for ln in ax.lines if ln.get_linewidth() == 6]
    assert len(runs) == len(res) and len(ax.patches) == b.size
    for ln, i in zip(runs, order):                                # each request's run, in arrival order
        np.testing.assert_allclose(ln.get_xdata(), [r["start"][i] * 1e3, r["finish"][i] * 1e3])
    # the window comes from config["max_queue_delay_us"] = 2000 µs
    np.testing.assert_allclose(ax.lines[-1].get_xdata(), [r["arrival"].min() * 1e3 + 2.0] * 2)
    assert_clean(ax)


# ----------------------------------------------------------------------------- bottleneck (chapter 01)


def test_stacked_latency_parts_stack_in_order():
    labels = ["低负载\n实测", "低负载\n模拟", "高负载\n实测"]
    rows = [{"queue": 1.5, "prefill": 4.0, "decode": 20.0, "overhead": 2.5},
            {"queue": 1.0, "prefill": 3.5, "decode": 19.0},             # simulated: no overhead part
            {"queue": 30.0, "prefill": 4.5, "decode": 22.0, "overhead": -0.5}]
    totals = [28.5, np.nan, 57.0]
    _, ax = plt.subplots()
    BN.stacked_latency(ax, labels, rows, totals=totals, hatches=[None, "//", None])
    parts = ("queue", "prefill", "decode", "overhead")
    assert len(ax.patches) == 4 * 3
    bottom = np.zeros(3)
    for k, part in enumerate(parts):
        bars = ax.patches[3 * k: 3 * k + 3]
        h = np.array([max(r.get(part, 0.0), 0.0) for r in rows])
        np.testing.assert_allclose([p.get_height() for p in bars], h)
        np.testing.assert_allclose([p.get_y() for p in bars], bottom)
        np.testing.assert_allclose([p.get_x() + p.get_width() / 2 for p in bars], [0, 1, 2])
        assert len({p.get_facecolor() for p in bars}) == 1                  # one colour per part
        bottom += h
    assert bottom == pytest.approx([28.0, 23.5, 56.5])
    (tot,) = ax.lines
    np.testing.assert_allclose(tot.get_xdata(), [0, 1, 2])
    np.testing.assert_allclose(tot.get_ydata(), totals)
    assert ax.get_ylim()[1] >= 57.0
    assert_clean(ax)

    _, ax = plt.subplots()
    with pytest.raises(ValueError):
        BN.stacked_latency(ax, labels[:2], rows)


def test_token_staircase_one_step_per_token():
    t = 40.0 + np.cumsum(np.random.default_rng(13).exponential(8.0, 25))   # TTFT then ~8 ms per token
    _, ax = plt.subplots()
    BN.token_staircase(ax, t)
    stair, dots = ax.lines
    assert stair.get_drawstyle() == "steps-post"
    np.testing.assert_allclose(stair.get_xdata(), np.concatenate([[0.0], t]))
    np.testing.assert_allclose(stair.get_ydata(), np.arange(26))
    np.testing.assert_allclose(dots.get_xdata(), t)
    np.testing.assert_allclose(dots.get_ydata(), np.arange(1, 26))
    assert ax.get_xlim()[0] == 0 and ax.get_ylim()[0] == 0
    assert_lines_inside(ax)
    assert_clean(ax)
    _, ax = plt.subplots()
    BN.token_staircase(ax, [5.0, 9.0], label="lm_stream", color="C2")
    with pytest.raises(ValueError):
        BN.token_staircase(ax, [])


def test_step_cost_bars_and_per_sequence_line():
    sizes = [1, 2, 4, 8, 16]
    step_ms = 5.0 + 0.4 * np.array(sizes) + np.random.default_rng(14).uniform(0, 0.2, 5)
    fig, ax = plt.subplots()
    BN.step_cost(ax, sizes, step_ms)
    ax_l, twin = fig.axes
    assert ax_l is ax
    np.testing.assert_allclose([p.get_height() for p in ax.patches], step_ms)
    np.testing.assert_allclose([p.get_x() + p.get_width() / 2 for p in ax.patches], range(5))
    (per,) = twin.lines
    np.testing.assert_allclose(per.get_xdata(), range(5))
    np.testing.assert_allclose(per.get_ydata(), step_ms / np.array(sizes))
    assert twin.get_ylim()[0] == 0
    assert_inside(twin, per.get_xdata(), per.get_ydata())
    assert ax.get_ylim()[1] >= step_ms.max()
    assert_clean(ax)

