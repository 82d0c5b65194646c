"""Legends that cover no data, and a check of what a reader would find wrong with a figure.

`legend(ax, ...)` is ``ax.legend`` with its place chosen when the figure is drawn (so after every
later ``set_ylim``, twin axis or ``tight_layout``): the preferred corner, then the other places
inside the axes, then outside to the right or below, the first whose box covers nothing plotted
(points with their marker size, line segments, bars, filled areas, texts, images, the twin axis'
tick labels, other panels).

`figure_problems(fig)` is the independent check the tests and the notebooks use. It renders the
figure: a legend must cover no drawn pixel (everything but the legends, grid lines and spines is
rendered, and compared with the bare background in each legend's box); every marker must lie
whole inside its axes; bars must end inside their axes; text labels placed in an axes must lie
inside it. `install_figure_check()` attaches that check to every figure a notebook displays (a
``application/vnd.batchlab.figure-check+json`` entry next to its PNG), so the stored notebooks
say whether each figure passed; `batchlab.plotting.setup` installs it inside IPython.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Iterable

import numpy as np
from matplotlib import cbook
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection, LineCollection, PathCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.markers import MarkerStyle
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox

FIGURE_CHECK_MIME = "application/vnd.batchlab.figure-check+json"
"""The mime type of the figure check stored next to each figure's PNG in a notebook."""

_INSIDE = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
           "upper center", "lower center", "right", "center")
_CODES = Legend.codes
_SAMPLE_PX = 3.0
"""Line segments are sampled every this many pixels when testing them against a legend box."""


# --------------------------------------------------------------------------- legend placement


OUTSIDE = ("outside right", "outside below")
"""Places next to the axes: right of it (top-aligned), or under its x-axis labels."""


def legend(ax: Axes, *args: Any, prefer: str | Iterable[str] = "upper left", axes: Iterable[Axes] = (),
           **kwargs: Any) -> Legend:
    """``ax.legend(*args, **kwargs)`` placed, each time it is drawn, where it covers nothing plotted.

    `prefer`: the place(s) tried first: matplotlib location names inside the axes, or
    ``"outside right"`` / ``"outside below"``; then the other places inside the axes; then outside
    to the right, then below. `axes`: further axes (a twin axis, say) whose handles join this
    legend; the data of every axes in the figure are avoided in any case.
    """
    if "loc" in kwargs:
        raise ValueError("legend() chooses loc itself; give prefer= instead")
    order = [prefer] if isinstance(prefer, str) else list(prefer)
    for name in order:
        if name not in _INSIDE and name not in OUTSIDE:
            raise ValueError(f"prefer must name a legend location or {' / '.join(OUTSIDE)}, not {name!r}")
    order += [n for n in (*_INSIDE, *OUTSIDE) if n not in order]
    extra = list(axes)
    if extra:
        handles, labels = (list(args[0]), list(args[1])) if args else ax.get_legend_handles_labels()
        for other in extra:
            h, lab = other.get_legend_handles_labels()
            handles, labels = handles + h, labels + lab
        args = (handles, labels)
    leg = ax.legend(*args, loc="best", **kwargs)
    leg._find_best_position = types.MethodType(lambda self, w, h, r: _clear_position(self, w, h, r, order), leg)
    return leg


def _clear_position(leg: Legend, width: float, height: float, renderer: Any, order: list[str]) -> tuple[float, float]:
    """Lower-left corner (display px) of the first place in `order` that covers nothing plotted."""
    ax = leg.parent
    fig = ax.get_figure(root=True)
    box = Bbox.from_bounds(0, 0, width, height)
    pad = leg.borderaxespad * renderer.points_to_pixels(leg._fontsize)
    obstacles = _Obstacles(fig, ax, renderer)
    bb = ax.bbox
    right = max([bb.x1] + [b.x1 for b in obstacles.own_axis_boxes])
    below = min([bb.y0] + [b.y0 for b in obstacles.own_axis_boxes])
    spots = {"outside right": (right + pad, bb.y1 - height),
             "outside below": (bb.x0 + (bb.width - width) / 2, below - pad - height)}
    for name in order:
        inside = name in _CODES
        x, y = (leg._get_anchored_bbox(_CODES[name], box, leg.get_bbox_to_anchor(), renderer)
                if inside else spots[name])
        if not obstacles.hit(Bbox.from_bounds(x, y, width, height), inside=inside):
            return x, y
    return spots[next((n for n in order if n in OUTSIDE), "outside right")]


class _Obstacles:
    """What a legend must not cover, in display pixels: points (with radius), boxes, filled paths."""

    def __init__(self, fig: Figure, ax: Axes, renderer: Any) -> None:
        pts: list[np.ndarray] = []
        radii: list[np.ndarray] = []
        self.boxes: list[Bbox] = []
        self.outside_boxes: list[Bbox] = []
        self.filled: list[Any] = []
        self.own_axis_boxes: list[Bbox] = []
        px = fig.dpi / 72.0
        for other in fig.axes:
            twin = other is ax or _same_box(other, ax)
            if not twin:
                extra = [a for a in other.get_default_bbox_extra_artists() if not isinstance(a, Legend)]
                tb = other.get_tightbbox(renderer, bbox_extra_artists=extra)
                if tb is not None:
                    self.outside_boxes.append(tb)
                continue
            for axis in (other.xaxis, other.yaxis):   # tick labels: the axes' own and a twin's
                tb = axis.get_tightbbox(renderer) if axis.get_visible() else None
                if tb is not None and tb.width > 0:
                    self.own_axis_boxes.append(tb)
            for art in other.get_children():
                if not art.get_visible() or isinstance(art, Legend) or art is other.patch:
                    continue
                if isinstance(art, Line2D):
                    xy = _line_display(art)
                    hx, hy = _marker_half(art)
                    seg = _sample(xy)
                    if _has_marker(art):  # the line between markers is thin
                        lw = art.get_linewidth() / 2
                        pts.append(seg)
                        radii.append(np.tile([lw * px, lw * px], (len(seg), 1)))
                        seg = xy
                    pts.append(seg)
                    radii.append(np.tile([hx * px, hy * px], (len(seg), 1)))
                elif isinstance(art, LineCollection):
                    for seg in art.get_segments():
                        xy = art.get_transform().transform(np.asarray(seg, float))
                        pts.append(_sample(xy))
                        radii.append(np.zeros((len(pts[-1]), 2)))
                elif isinstance(art, PolyCollection):
                    for path in art.get_paths():
                        self.filled.append(art.get_transform().transform_path(path))
                elif isinstance(art, (PathCollection, Collection)):
                    offs = art.get_offsets()
                    if len(offs):
                        xy = art.get_offset_transform().transform(np.asarray(offs, float))
                        sizes = art.get_sizes() if isinstance(art, PathCollection) else np.array([16.0])
                        r = np.sqrt(np.resize(sizes if len(sizes) else [16.0], len(xy))) / 2 * px
                        pts.append(xy)
                        radii.append(np.column_stack([r, r]))
                elif isinstance(art, Rectangle):
                    self.boxes.append(art.get_window_extent(renderer))
                elif isinstance(art, (Text, AxesImage)) and (not isinstance(art, Text) or art.get_text()):
                    self.boxes.append(art.get_window_extent(renderer))
                elif hasattr(art, "get_path") and hasattr(art, "get_transform") and not _is_axis_part(art):
                    self.filled.append(art.get_transform().transform_path(art.get_path()))
        self.points = np.concatenate(pts) if pts else np.zeros((0, 2))
        self.radii = np.concatenate(radii) if radii else np.zeros((0, 2))
        ok = np.all(np.isfinite(self.points), axis=1)
        self.points, self.radii = self.points[ok], self.radii[ok]

    def hit(self, box: Bbox, inside: bool) -> bool:
        """True when `box` covers any obstacle (outside places also avoid other panels and the
        twin axis' labels)."""
        x0, y0, x1, y1 = box.x0 - 1, box.y0 - 1, box.x1 + 1, box.y1 + 1
        p, rx, ry = self.points, self.radii[:, 0], self.radii[:, 1]
        if p.size and np.any((p[:, 0] >= x0 - rx) & (p[:, 0] <= x1 + rx) & (p[:, 1] >= y0 - ry) & (p[:, 1] <= y1 + ry)):
            return True
        grown = Bbox.from_extents(x0, y0, x1, y1)
        if any(grown.overlaps(b) for b in self.boxes):
            return True
        grid = np.array([(x, y) for x in np.linspace(x0, x1, 7) for y in np.linspace(y0, y1, 5)])
        for path in self.filled:
            if path.contains_points(grid).any() or grown.count_contains(path.vertices) > 0:
                return True
        if not inside:
            others = self.outside_boxes + self.own_axis_boxes
            if any(grown.overlaps(b) for b in others):
                return True
        return False


def _same_box(a: Axes, b: Axes) -> bool:
    return bool(np.allclose(a.get_position().bounds, b.get_position().bounds))


def _is_axis_part(art: Any) -> bool:
    name = type(art).__name__
    return name in ("Spine", "XAxis", "YAxis") or art.__class__.__module__.startswith("matplotlib.axis")


def _line_display(line: Line2D) -> np.ndarray:
    """A line's vertices in display pixels, with its step drawstyle applied."""
    x, y = (np.asarray(v, float) for v in line.get_data(orig=False))
    x, y = np.broadcast_arrays(np.atleast_1d(x), np.atleast_1d(y))
    style = line.get_drawstyle() or "default"
    if style in cbook.STEP_LOOKUP_MAP and x.size > 1:
        x, y = cbook.STEP_LOOKUP_MAP[style](x, y)
    return line.get_transform().transform(np.column_stack([x, y]))


def _sample(xy: np.ndarray) -> np.ndarray:
    """Points along a polyline every ~`_SAMPLE_PX` pixels (NaN vertices break it)."""
    if len(xy) < 2:
        return xy
    out = [xy]
    a, b = xy[:-1], xy[1:]
    d = np.hypot(*(b - a).T)
    ok = np.isfinite(d) & (d > _SAMPLE_PX)
    for p, q, n in zip(a[ok], b[ok], np.ceil(d[ok] / _SAMPLE_PX).astype(int)):
        t = np.linspace(0, 1, n + 1)[1:-1, None]
        out.append(p + t * (q - p))
    return np.concatenate(out)


def _has_marker(line: Line2D) -> bool:
    return line.get_marker() not in (None, "", " ", "None", "none") and bool(line.get_markersize())


def _marker_half(line: Line2D) -> tuple[float, float]:
    """Half the width and half the height (points) of a line's marker, its edge included; half
    the line width both ways without a marker ('_' is wide and flat, '|' tall and thin)."""
    if not _has_marker(line):
        return line.get_linewidth() / 2, line.get_linewidth() / 2
    style = MarkerStyle(line.get_marker())
    ext = style.get_path().transformed(style.get_transform()).get_extents()
    edge = line.get_markeredgewidth() / 2
    size = line.get_markersize()
    return (max(abs(ext.x0), abs(ext.x1)) * size + edge, max(abs(ext.y0), abs(ext.y1)) * size + edge)


# --------------------------------------------------------------------------- the check


def figure_problems(fig: Figure) -> list[str]:
    """What a reader would find wrong with `fig` (empty when nothing): a legend over anything
    drawn, a marker cut by (or outside) its axes' edge, a bar ending outside its axes, a text
    label of an axes lying outside it. Measured on the rendered figure, in pixels."""
    canvas, old = fig.canvas, None
    if not hasattr(canvas, "buffer_rgba") or not hasattr(canvas, "get_renderer"):
        old = canvas
        canvas = FigureCanvasAgg(fig)
    try:
        canvas.draw()
        renderer = canvas.get_renderer()
        problems = _legend_problems(fig, canvas, renderer)
        problems += _edge_problems(fig, renderer)
    finally:
        if old is not None:
            fig.set_canvas(old)
    return problems


def _name(fig: Figure, ax: Axes) -> str:
    title = ax.get_title() or ax.get_ylabel() or ""
    return f"axes {fig.axes.index(ax)}" + (f" ({title!r})" if title else "")


def _legends(fig: Figure) -> list[tuple[Legend, str]]:
    out = [(ax.get_legend(), _name(fig, ax)) for ax in fig.axes if ax.get_legend() is not None]
    out += [(leg, "figure") for leg in fig.legends]
    return [(leg, where) for leg, where in out if leg.get_visible()]


def _render(canvas: Any) -> np.ndarray:
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(np.int16).copy()


def _legend_problems(fig: Figure, canvas: Any, renderer: Any) -> list[str]:
    legends = _legends(fig)
    if not legends:
        return []
    boxes = [leg.get_window_extent(renderer) for leg, _ in legends]
    hidden: list[Any] = []

    def hide(art: Any) -> None:
        if art.get_visible():
            art.set_visible(False)
            hidden.append(art)

    try:
        for leg, _ in legends:
            hide(leg)
        for ax in fig.axes:
            for line in ax.get_xgridlines() + ax.get_ygridlines():
                hide(line)
            for sp in ax.spines.values():
                hide(sp)
        drawn = _render(canvas)
        for ax in fig.axes:
            for art in ax.get_children():
                if art is not ax.patch:
                    hide(art)
        for art in fig.get_children():
            if art is not fig.patch and not isinstance(art, Axes):
                hide(art)
        bare = _render(canvas)
    finally:
        for art in hidden:
            art.set_visible(True)
        canvas.draw()
    h = drawn.shape[0]
    out = []
    for (leg, where), box in zip(legends, boxes):
        x0, x1 = int(np.ceil(box.x0)) + 1, int(np.floor(box.x1)) - 1
        y0, y1 = h - int(np.floor(box.y1)) + 1, h - int(np.ceil(box.y0)) - 1   # rows count from the top
        x0, y0 = max(x0, 0), max(y0, 0)
        if x1 <= x0 or y1 <= y0:
            continue
        diff = np.abs(drawn[y0:y1, x0:x1] - bare[y0:y1, x0:x1]).max(axis=2)
        covered = int((diff > 24).sum())
        if covered > 3:
            labels = ", ".join(t.get_text() for t in leg.get_texts()[:3])
            out.append(f"{where}: the legend [{labels}] covers {covered} drawn pixels")
    return out


def _inside(bb: Bbox, x: np.ndarray, y: np.ndarray, r: Any, tol: float = 1.0, ry: Any = None) -> np.ndarray:
    ry = r if ry is None else ry
    return (x - r >= bb.x0 - tol) & (x + r <= bb.x1 + tol) & (y - ry >= bb.y0 - tol) & (y + ry <= bb.y1 + tol)


def _bar_inside(ax: Axes, bar: Rectangle) -> bool:
    """True when a bar's data rectangle lies inside the view limits (a zero baseline on a log axis,
    where 0 cannot be drawn, counts as the axis edge)."""
    x, y, w, h = bar.get_x(), bar.get_y(), bar.get_width(), bar.get_height()
    for (lo, hi), (v0, v1), log in (((min(x, x + w), max(x, x + w)), sorted(ax.get_xlim()), ax.get_xscale() != "linear"),
                                    ((min(y, y + h), max(y, y + h)), sorted(ax.get_ylim()), ax.get_yscale() != "linear")):
        if hi == lo:
            continue
        tol = 1e-9 * max(abs(v0), abs(v1), 1.0)
        if log and lo <= 0:
            lo = v0
        if lo < v0 - tol or hi > v1 + tol:
            return False
    return True


def _edge_problems(fig: Figure, renderer: Any) -> list[str]:
    out = []
    px = fig.dpi / 72.0
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        bb = ax.bbox
        where = _name(fig, ax)
        for line in ax.lines:
            if not line.get_visible() or not _has_marker(line) or not line.get_clip_on():
                continue
            xy = line.get_transform().transform(np.column_stack(
                np.broadcast_arrays(*[np.atleast_1d(np.asarray(v, float)) for v in line.get_data(orig=False)])))
            ok = np.all(np.isfinite(xy), axis=1)
            hx, hy = _marker_half(line)
            bad = ~_inside(bb, xy[ok, 0], xy[ok, 1], hx * px, ry=hy * px)
            if bad.any():
                out.append(f"{where}: {int(bad.sum())} marker(s) of {line.get_label()!r} cut by the axes edge")
        for coll in ax.collections:
            if not isinstance(coll, PathCollection) or not coll.get_visible() or not len(coll.get_offsets()):
                continue
            xy = coll.get_offset_transform().transform(np.asarray(coll.get_offsets(), float))
            r = np.sqrt(np.resize(coll.get_sizes(), len(xy))) / 2 * px
            ok = np.all(np.isfinite(xy), axis=1)
            bad = ~_inside(bb, xy[ok, 0], xy[ok, 1], r[ok])
            if bad.any():
                out.append(f"{where}: {int(bad.sum())} point(s) of {coll.get_label()!r} cut by the axes edge")
        for patch in ax.patches:
            if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_data_transform() == ax.transData:
                if not _bar_inside(ax, patch):
                    out.append(f"{where}: a bar ends outside the axes")
                    break
        for text in ax.texts:
            if not text.get_visible() or not text.get_text().strip():
                continue
            e = text.get_window_extent(renderer)
            if not _inside(bb, np.array([e.x0, e.x1]), np.array([e.y0, e.y1]), 0.0).all():
                out.append(f"{where}: the label {text.get_text()!r} lies outside the axes")
    return out


# --------------------------------------------------------------------------- notebooks


def _check_for_display(fig: Figure) -> dict[str, Any]:
    try:
        return {"problems": figure_problems(fig)}
    except Exception as exc:  # noqa: BLE001 - a display hook must never raise in a learner's cell
        return {"problems": [], "error": f"{type(exc).__name__}: {exc}"}


def install_figure_check() -> bool:
    """Inside IPython: store `figure_problems` with every displayed figure (its own mime type).

    Returns True when installed (or already there); False outside IPython.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    formatters = shell.display_formatter.formatters
    active = shell.display_formatter.active_types
    if FIGURE_CHECK_MIME in formatters:
        if FIGURE_CHECK_MIME not in active:
            active.append(FIGURE_CHECK_MIME)
        return True
    from IPython.core.formatters import JSONFormatter  # only inside IPython, which is loaded here

    class FigureCheckFormatter(JSONFormatter):
        """Formats figures only; by isinstance, because the inline backend clears every
        formatter's Figure entry when it (re)configures itself."""

        format_type = FIGURE_CHECK_MIME

        def __call__(self, obj: Any) -> Any:
            return _check_for_display(obj) if self.enabled and isinstance(obj, Figure) else None

    fmt = FigureCheckFormatter(parent=shell.display_formatter)
    formatters[FIGURE_CHECK_MIME] = fmt
    if FIGURE_CHECK_MIME not in active:  # display() computes only the active mime types
        active.append(FIGURE_CHECK_MIME)
    return True
