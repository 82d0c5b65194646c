"""Checks every figure test applies: no legend over data, and every labelled mark in the legend."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from batchlab.plotting.layout import figure_problems


def assert_clean(fig_or_ax: Any) -> None:
    """Fail with the list of legends that cover drawn pixels (of the figure or the axes' figure)."""
    fig = fig_or_ax if isinstance(fig_or_ax, Figure) else fig_or_ax.get_figure(root=True)
    problems = figure_problems(fig)
    assert problems == [], "\n".join(problems)


def legend_of(ax: Any, *twins: Any) -> list[str]:
    """The texts of `ax`'s legend, after checking they are the labels of every labelled mark drawn
    on `ax` and its `twins`, in drawing order."""
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    marks = [label for a in (ax, *twins) for label in a.get_legend_handles_labels()[1]]
    assert texts == marks, (texts, marks)
    return texts
