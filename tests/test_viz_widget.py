"""The chapter-00 animation: controls a browser test can find, stepping redraws, headless stills."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from batchlab.viz import DemoParams, default_horizon, run_demo  # noqa: E402
from batchlab.viz.draw import film_strip, render_png  # noqa: E402
from batchlab.viz.widget import BatchingAnimation  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def anim() -> BatchingAnimation:
    return BatchingAnimation(DemoParams(n_requests=20), n_frames=12)


def test_controls_carry_the_css_classes(anim: BatchingAnimation) -> None:
    classes = {
        "batchlab-play": anim.play, "batchlab-step": anim.step_button, "batchlab-frame": anim.picture,
        "batchlab-frame-label": anim.label, "batchlab-frame-slider": anim.slider, "batchlab-speed": anim.speed,
        "batchlab-rate": anim.rate, "batchlab-batch": anim.batch, "batchlab-delay": anim.delay,
    }
    for cls, widget in classes.items():
        assert cls in widget._dom_classes, cls
    assert anim.play.max == anim.slider.max == 11


@pytest.mark.slow
def test_step_changes_label_and_picture(anim: BatchingAnimation) -> None:
    anim.slider.value = 0
    label, picture = anim.label.value, anim.picture.value
    assert picture.startswith("<img") and "base64," in picture and label == "第 1 / 12 帧 · t = 0.00 s"
    assert anim.step() == 1
    assert anim.label.value == f"第 2 / 12 帧 · t = {anim.horizon / 11:.2f} s" and anim.picture.value != picture
    anim.step_button.click()
    assert anim.index == 2
    anim.slider.value = 11
    anim.step()
    assert anim.index == 0  # wraps around


@pytest.mark.slow
def test_speed_and_parameters(anim: BatchingAnimation) -> None:
    anim.speed.value = 300
    assert anim.play.interval == 300
    anim.slider.value = 5
    old = anim.lanes[1].finish.copy()
    anim.delay.value = 0
    assert anim.index == 0 and anim.params.max_queue_delay_ms == 0
    assert anim.lanes[1].delay_s == 0 and not (anim.lanes[1].finish == old).all()
    with pytest.raises(ValueError):
        anim.show_frame(12)


def test_render_png_and_film_strip_draw_chinese_without_missing_glyphs(tmp_path) -> None:
    lanes = run_demo(DemoParams(n_requests=15))
    h = default_horizon(lanes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # matplotlib warns "Glyph … missing from font(s)"
        png = render_png(lanes, h / 2, h)
        fig = film_strip(lanes, [h * 0.2, h * 0.6])
        fig.savefig(tmp_path / "strip.png")
    plt.close(fig)
    assert png.startswith(PNG) and len(png) > 10_000
    with pytest.raises(ValueError):
        film_strip(lanes, [])


def test_film_strip_shows_each_lanes_frame_at_each_instant() -> None:
    """One column per instant, one row per lane; each panel shows that lane's frame at that instant."""
    from batchlab.viz import frame_at

    lanes = run_demo(DemoParams(n_requests=15))
    h = default_horizon(lanes)
    times = [h * 0.2, h * 0.6]
    fig = film_strip(lanes, times)
    assert len(fig.axes) == len(lanes) * len(times)
    grid = [fig.axes[i * len(times):(i + 1) * len(times)] for i in range(len(lanes))]  # row-major
    assert [ax.get_title() for ax in grid[0]] == [f"t = {t:.1f} s" for t in times]
    for i, lane in enumerate(lanes):
        for j, t in enumerate(times):
            fr = frame_at(lane, t)
            shown = [x.get_text() for x in grid[i][j].texts]
            assert (lane.name in shown) == (j == 0)  # the lane is named in the first column only
            assert f"排队 {fr.queue_len}" in shown and f"锅里 {fr.batch_size}/{lane.slots}" in shown
            assert f"已完成 {fr.done}\n忙碌率 {fr.busy:.0%}\n满锅率 {fr.fill:.0%}" in shown
    # the frames differ between the instants: the strip is not one picture repeated
    assert [x.get_text() for x in grid[0][0].texts] != [x.get_text() for x in grid[0][1].texts]
    plt.close(fig)


def test_the_animation_leaves_no_figure_for_a_headless_run_to_show() -> None:
    """Built and stepped without a browser, it draws into its own closed figure: nothing waits for a
    display and the inline backend has no stray figure to show."""
    plt.close("all")
    anim = BatchingAnimation(DemoParams(n_requests=10), n_frames=4)
    anim.step(3)
    assert anim.index == 3 and plt.get_fignums() == []
    assert "<BatchingAnimation: 4 frames" in anim._repr_mimebundle_()["text/plain"]
