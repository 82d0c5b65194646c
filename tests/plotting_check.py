"""The one check every figure test applies: `assert_clean(fig)`.

It renders the figure and fails, naming the axes, when a legend covers anything drawn (pixels,
so lines, markers, bars, shaded spans, texts and other panels all count), a marker or a scatter
point is cut by its axes' edge, a bar ends outside its axes, or a text label lies outside its
axes (`batchlab.plotting.layout.figure_problems`).
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from batchlab.plotting.layout import figure_problems


def assert_clean(fig_or_ax: Any) -> None:
    """Fail with the list of problems of the figure (or of the figure an axes belongs to)."""
    fig = fig_or_ax if isinstance(fig_or_ax, Figure) else fig_or_ax.get_figure(root=True)
    problems = figure_problems(fig)
    assert problems == [], "\n".join(problems)
