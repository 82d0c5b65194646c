"""batchlab.plotting.layout: the figure check catches what a reader would see, and `legend` avoids it.

The check is tried on planted faults (each must be caught, naming its axes) and on the same
figures done right (each must pass); the placement on figures where the usual corner is taken.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)

from batchlab.plotting import setup  # noqa: E402
from batchlab.plotting.layout import FIGURE_CHECK_MIME, figure_problems, install_figure_check, legend  # noqa: E402

X = np.linspace(0, 1, 60)


@pytest.fixture(autouse=True)
def _figures():
    setup()
    yield
    plt.close("all")


def _top_line(ax) -> None:
    """A line along the top and one along the bottom: only the middle of the axes is free."""
    ax.plot(X, 0.95 + 0 * X, label="100 %")
    ax.plot(X, 0.05 + 0 * X, label="0 %")
    ax.set_ylim(0, 1)


def test_a_legend_over_a_line_is_caught_and_legend_avoids_it() -> None:
    fig, ax = plt.subplots()
    _top_line(ax)
    ax.legend(loc="upper left")
    (msg,) = figure_problems(fig)
    assert msg.startswith("axes 0: the legend [100 %, 0 %] covers") and "drawn pixels" in msg
    fig, ax = plt.subplots()
    _top_line(ax)
    leg = legend(ax)
    assert figure_problems(fig) == []
    box = leg.get_window_extent()
    assert ax.bbox.y0 < box.y0 and box.y1 < ax.bbox.y1              # inside, between the lines


@pytest.mark.parametrize("kind", ["markers", "scatter", "bars", "span", "text", "twin"])
def test_every_kind_of_drawing_counts(kind: str) -> None:
    """A legend forced into the upper left is caught over each kind of artist there."""
    fig, ax = plt.subplots()
    ax.plot([0.5], [0.5], "k.", label="centre")
    if kind == "markers":
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
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left")
    assert any("covers" in p for p in figure_problems(fig)), kind
    ax.get_legend().remove()
    legend(ax, axes=fig.axes[1:])
    assert figure_problems(fig) == [], kind


def test_cut_markers_bars_and_stray_labels_are_caught() -> None:
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1, 2, 3], "o", label="S(B)")
    ax.set_xlim(1, 3)
    assert figure_problems(fig) == ["axes 0: 2 marker(s) of 'S(B)' cut by the axes edge"]
    ax.set_xlim(0.9, 3.1)
    ax.set_ylim(0.8, 3.2)
    assert figure_problems(fig) == []

    fig, ax = plt.subplots()
    ax.bar([0, 1], [5, 10])
    ax.annotate("10", (1, 10), ha="center", va="bottom")
    ax.set_ylim(0, 8)
    assert figure_problems(fig) == ["axes 0: a bar ends outside the axes", "axes 0: the label '10' lies outside the axes"]
    ax.set_ylim(0, 11.5)
    assert figure_problems(fig) == []

    fig, ax = plt.subplots()                                          # log bars from 0 are fine
    ax.bar([0, 1], [3, 300])
    ax.set_yscale("log")
    ax.set_ylim(1, 1000)
    assert figure_problems(fig) == []


@pytest.mark.slow
def test_legend_goes_outside_when_the_axes_are_full_and_follows_later_limits() -> None:
    fig, ax = plt.subplots()
    for k in range(12):                                              # a grid of points everywhere
        ax.plot(X, (k + 0.5) / 12 + 0 * X, ".", color="C0", label="rows" if k == 0 else None)
    ax.set_ylim(0, 1)
    leg = legend(ax, prefer="upper right")
    fig.canvas.draw()
    assert leg.get_window_extent().x0 > ax.bbox.x1                   # outside, to the right
    assert figure_problems(fig) == []
    ax.set_ylim(0, 2)                                                # the top half is free now
    fig.canvas.draw()
    box = leg.get_window_extent()
    assert box.x1 < ax.bbox.x1 and box.y0 > ax.bbox.y0 + ax.bbox.height / 2
    assert figure_problems(fig) == []

    fig, ax = plt.subplots()
    ax.plot(X, X, label="diag")
    leg = legend(ax, prefer="outside below")
    fig.canvas.draw()
    assert leg.get_window_extent().y1 < ax.bbox.y0
    with pytest.raises(ValueError, match="prefer"):
        legend(ax, prefer="top")
    with pytest.raises(ValueError, match="prefer"):
        legend(ax, loc="upper left")


def test_two_panels_with_placed_legends_do_not_recurse() -> None:
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        _top_line(ax)
        legend(ax)
    fig.tight_layout()
    assert figure_problems(fig) == []


def test_the_check_rides_along_with_every_displayed_figure() -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats

    shell = InteractiveShell.instance()
    select_figure_formats(shell, {"png"})                            # what the inline backend does
    assert "image/png" in shell.display_formatter.active_types       # fixed before the check came
    try:
        assert install_figure_check() and install_figure_check()     # idempotent
        select_figure_formats(shell, {"png"})    # the inline backend reconfigures at the first figure
        fig, ax = plt.subplots()
        _top_line(ax)
        ax.legend(loc="upper left")
        data, _ = shell.display_formatter.format(fig)
        assert "image/png" in data
        assert data[FIGURE_CHECK_MIME]["problems"][0].startswith("axes 0: the legend")
        ax.get_legend().remove()
        legend(ax)
        data, _ = shell.display_formatter.format(fig)
        assert data[FIGURE_CHECK_MIME] == {"problems": []}
    finally:
        shell.display_formatter.formatters.pop(FIGURE_CHECK_MIME, None)
        if FIGURE_CHECK_MIME in shell.display_formatter.active_types:
            shell.display_formatter.active_types.remove(FIGURE_CHECK_MIME)
        InteractiveShell.clear_instance()
