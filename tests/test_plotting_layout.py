"""batchlab.plotting.layout: the check catches a legend over each kind of drawing, and `legend`
puts the legend where the check passes (matplotlib's "best", or beside the axes)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)

from batchlab.plotting import setup  # noqa: E402
from batchlab.plotting.fonts import figure  # noqa: E402
from batchlab.plotting.layout import FIGURE_CHECK_MIME, figure_problems, install_figure_check, legend  # noqa: E402

X = np.linspace(0, 1, 60)


@pytest.fixture(autouse=True)
def _figures():
    setup()
    yield
    plt.close("all")


def _rails(ax) -> None:
    """A line along the top and one along the bottom: only the middle of the axes is free."""
    ax.plot(X, 0.95 + 0 * X, label="100 %")
    ax.plot(X, 0.05 + 0 * X, label="0 %")
    ax.set_ylim(0, 1)


@pytest.mark.parametrize("kind", ["line", "markers", "scatter", "bars", "span", "text", "twin"])
def test_a_legend_over_any_drawing_is_caught_and_one_beside_the_axes_passes(kind: str) -> None:
    fig, ax = figure()
    ax.plot([0.5], [0.5], "k.", label="centre")
    if kind == "line":
        ax.plot([0.0, 0.3], [0.9, 0.9], label="line")
    elif kind == "markers":
        ax.plot([0.05, 0.1], [0.9, 0.92], "o", label="pts")
    elif kind == "scatter":
        ax.scatter([0.08], [0.9], s=40, label="pt")
    elif kind == "bars":
        ax.bar([0.1], [0.95], 0.1, label="bar")
    elif kind == "span":
        ax.axvspan(0.0, 0.2, alpha=0.15, color="C1", label="span")
    elif kind == "text":
        ax.text(0.02, 0.9, "a value label")
    else:
        tw = ax.twinx()
        tw.plot([0.02, 0.2], [9, 9.5], color="C3", label="twin")
        tw.set_ylim(0, 10)
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    (msg,) = figure_problems(fig)
    assert msg.startswith("axes 0: the legend [centre") and msg.endswith("drawn pixels"), msg
    ax.get_legend().remove()
    leg = legend(ax, axes=fig.axes[1:], outside="right")
    assert figure_problems(fig) == []
    assert [t.get_text() for t in leg.get_texts()] == [h.get_label() for ax_ in fig.axes
                                                       for h in ax_.get_legend_handles_labels()[0]]


def test_best_finds_the_free_middle_and_outside_places_clear_the_labels() -> None:
    fig, ax = figure()
    _rails(ax)
    leg = legend(ax)
    assert figure_problems(fig) == []
    box = leg.get_window_extent()
    assert ax.bbox.y0 < box.y0 and box.y1 < ax.bbox.y1

    fig, ax = plt.subplots()
    _rails(ax)
    ax.set_xlabel("时间 (s)")
    leg = legend(ax, outside="below", ncol=2)
    fig.canvas.draw()
    assert leg.get_window_extent().y1 < ax.xaxis.label.get_window_extent().y0   # under the axis label
    assert figure_problems(fig) == []
    with pytest.raises(ValueError, match="outside"):
        legend(ax, outside="top")


def test_the_check_keeps_a_constrained_layout_and_tells_two_panels_apart() -> None:
    fig, axes = figure(1, 2)
    for ax in axes:
        _rails(ax)
    axes[0].set_title("left")
    axes[0].legend(loc="upper left")
    legend(axes[1])
    fig.canvas.draw()
    before = [ax.get_position().bounds for ax in axes]
    (msg,) = figure_problems(fig)
    assert msg.startswith("axes 0 ('left'): the legend [100 %, 0 %]")
    assert [ax.get_position().bounds for ax in axes] == [pytest.approx(b) for b in before] and fig.get_layout_engine() is not None


def test_the_check_rides_along_with_every_displayed_figure() -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats

    assert not install_figure_check()                                  # no IPython shell yet
    shell = InteractiveShell.instance()
    select_figure_formats(shell, {"png"})
    try:
        assert install_figure_check() and install_figure_check()     # idempotent
        select_figure_formats(shell, {"png"})    # the inline backend reconfigures at the first figure
        fig, ax = plt.subplots()
        _rails(ax)
        ax.legend(loc="upper left")
        data, _ = shell.display_formatter.format(fig)
        assert "image/png" in data and data[FIGURE_CHECK_MIME]["problems"][0].startswith("axes 0: the legend")
        ax.get_legend().remove()
        legend(ax)
        assert shell.display_formatter.format(fig)[0][FIGURE_CHECK_MIME] == {"problems": []}
    finally:
        shell.display_formatter.formatters.pop(FIGURE_CHECK_MIME, None)
        if FIGURE_CHECK_MIME in shell.display_formatter.active_types:
            shell.display_formatter.active_types.remove(FIGURE_CHECK_MIME)
        InteractiveShell.clear_instance()
