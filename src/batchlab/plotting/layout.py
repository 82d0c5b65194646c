"""Legends placed by matplotlib (`legend`), and a check that no legend covers anything drawn
(`figure_problems`), stored next to every figure a notebook displays (`install_figure_check`)."""

from typing import Any, Iterable, Sequence

import numpy as np
from IPython import get_ipython
from IPython.core.formatters import JSONFormatter
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import ScaledTranslation

FIGURE_CHECK_MIME = "application/vnd.batchlab.figure-check+json"

#: loc, anchor (axes fraction) and shift (points, past the tick and axis labels) of each outside place
_OUTSIDE = {"right": ("upper left", (1.0, 1.0), (6.0, 0.0)), "below": ("upper center", (0.5, 0.0), (0.0, -36.0))}


def legend(ax: Axes, *args: Any, axes: Sequence[Axes] = (), outside: str | None = None, **kwargs: Any) -> Legend:
    """``ax.legend(*args, **kwargs)`` at ``loc="best"`` unless `loc` is given, with the handles of `axes`
    (twin axes) appended; `outside` = ``"right"`` (past a twin's labels) or ``"below"`` beside the axes."""
    if axes:
        pairs = [args[:2] if args else ax.get_legend_handles_labels()] + [a.get_legend_handles_labels() for a in axes]
        args = ([h for p in pairs for h in p[0]], [lab for p in pairs for lab in p[1]])
    if outside is not None:
        if outside not in _OUTSIDE:
            raise ValueError(f"outside must be one of {', '.join(_OUTSIDE)}, not {outside!r}")
        loc, anchor, (dx, dy) = _OUTSIDE[outside]
        dx += 56.0 if axes and outside == "right" else 0.0   # the labels of the twin axis on the right
        shift = ScaledTranslation(dx / 72, dy / 72, ax.get_figure(root=True).dpi_scale_trans)
        kwargs.update(loc=loc, bbox_to_anchor=anchor, bbox_transform=ax.transAxes + shift, borderaxespad=0)
    kwargs.setdefault("loc", "best")
    return ax.legend(*args, **kwargs)


def figure_problems(fig: Figure) -> list[str]:
    """One line per legend of `fig` that covers drawn pixels (lines, markers, bars, spans, texts,
    other panels; grid lines and spines do not count); empty when none does."""
    named = [(ax.get_legend(), f"axes {i}" + (f" ({ax.get_title()!r})" if ax.get_title() else ""))
             for i, ax in enumerate(fig.axes)]
    legends = [(g, where) for g, where in named + [(g, "figure") for g in fig.legends] if g is not None and g.get_visible()]
    if not legends:
        return []
    old = fig.canvas
    canvas, hidden = (old if hasattr(old, "buffer_rgba") else FigureCanvasAgg(fig)), []

    def render(hide: Iterable[Any]) -> np.ndarray:
        for art in [a for a in hide if a.get_visible()]:
            art.set_visible(False)
            hidden.append(art)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].astype(np.int16)

    engine = fig.get_layout_engine()
    try:
        canvas.draw()   # places the legends; the layout stays as it is while parts are hidden
        boxes = [leg.get_window_extent() for leg, _ in legends]
        fig.set_layout_engine("none")
        drawn = render([g for g, _ in legends] + [a for ax in fig.axes for a in
                                                  (*ax.get_xgridlines(), *ax.get_ygridlines(), *ax.spines.values())])
        bare = render([a for a in fig.get_children() if a is not fig.patch and not isinstance(a, Axes)]
                      + [a for ax in fig.axes for a in ax.get_children() if a is not ax.patch])
    finally:
        for art in hidden:
            art.set_visible(True)
        if engine is not None:
            fig.set_layout_engine(engine)
        if canvas is not old:
            fig.set_canvas(old)
    out, h = [], drawn.shape[0]
    for (leg, where), b in zip(legends, boxes):   # image rows count from the top; the box's edge is left out
        rows = slice(max(h - int(b.y1) + 1, 0), max(h - int(np.ceil(b.y0)) - 1, 0))
        cols = slice(max(int(np.ceil(b.x0)) + 1, 0), max(int(b.x1) - 1, 0))
        covered = int((np.abs(drawn[rows, cols] - bare[rows, cols]).max(axis=2, initial=0) > 24).sum())
        if covered > 3:
            out.append(f"{where}: the legend [{', '.join(t.get_text() for t in leg.get_texts()[:3])}] "
                       f"covers {covered} drawn pixels")
    return out


class _FigureCheck(JSONFormatter):   # figures only, found by isinstance: the inline backend resets type entries
    format_type = FIGURE_CHECK_MIME

    def __call__(self, obj: Any) -> Any:
        try:
            return {"problems": figure_problems(obj)} if self.enabled and isinstance(obj, Figure) else None
        except Exception as exc:  # noqa: BLE001 - a display hook must not break a learner's cell
            return {"problems": [], "error": f"{type(exc).__name__}: {exc}"}


def install_figure_check() -> bool:
    """Inside IPython, store `figure_problems` with every displayed figure; False outside IPython."""
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    fmt = shell.display_formatter
    fmt.formatters.setdefault(FIGURE_CHECK_MIME, _FigureCheck(parent=fmt))
    if FIGURE_CHECK_MIME not in fmt.active_types:  # display() computes only the active mime types
        fmt.active_types.append(FIGURE_CHECK_MIME)
    return True
