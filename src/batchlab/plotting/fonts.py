"""A CJK font for matplotlib (Noto Sans CJK SC from the `mplfonts` wheel, else a system font), so
Chinese figure text never renders as empty boxes; `zh()` falls back to English without one."""

from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib import font_manager

from batchlab.plotting.layout import install_figure_check

try:
    import mplfonts
except ImportError:  # optional: the wheel that ships Noto Sans CJK SC
    mplfonts = None

_STATE: dict[str, object] = {"done": False, "family": None}
_SYSTEM_FAMILIES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Micro Hei",
                    "WenQuanYi Zen Hei", "Microsoft YaHei", "PingFang SC", "SimHei", "Heiti SC")


def setup(style: bool = True) -> str | None:
    """Put a CJK font first in ``font.sans-serif`` and return its family (None if none exists);
    with `style`, also the course's figure defaults. Idempotent. Inside IPython it also attaches
    the figure check (`layout.install_figure_check`) to displayed figures."""
    install_figure_check()
    if not _STATE["done"]:
        shipped = Path(mplfonts.__file__).parent / "fonts" / "NotoSansCJKsc-Regular.otf" if mplfonts else None
        if shipped is not None and shipped.is_file():
            font_manager.fontManager.addfont(str(shipped))
            family = font_manager.FontProperties(fname=str(shipped)).get_name()
        else:
            names = {f.name for f in font_manager.fontManager.ttflist}
            family = next((f for f in _SYSTEM_FAMILIES if f in names), None)
        if family:
            mpl.rcParams["font.sans-serif"] = [family, *mpl.rcParams["font.sans-serif"]]
            mpl.rcParams["font.family"] = "sans-serif"
        mpl.rcParams["axes.unicode_minus"] = False
        _STATE.update(done=True, family=family)
    if style:
        mpl.rcParams.update({"figure.figsize": (7.0, 3.8), "figure.dpi": 100, "savefig.dpi": 120, "axes.grid": True,
                             "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False})
    return _STATE["family"]  # type: ignore[return-value]


def cjk_available() -> bool:
    """True when a CJK font is configured (calls `setup` if needed)."""
    if not _STATE["done"]:
        setup(style=False)
    return _STATE["family"] is not None


def zh(cn: str, en: str) -> str:
    """The Chinese label if Chinese can render, else the English one."""
    return cn if cjk_available() else en


def figure(*args: Any, **kwargs: Any) -> Any:
    """``plt.subplots(*args, **kwargs)`` with the fonts set up and constrained layout."""
    setup()
    return plt.subplots(*args, layout="constrained", **kwargs)


def new_axes(ax: Any = None, figsize: tuple[float, float] = (7.0, 3.8)) -> Any:
    """`ax` itself, or the axes of a new `figure` when `ax` is None."""
    return ax if ax is not None else figure(figsize=figsize)[1]
