"""A CJK font for matplotlib, found on the system or shipped by the `mplfonts` wheel.

Chinese figure text must never render as empty boxes. `setup()` looks for a Simplified Chinese
font (Noto Sans CJK SC from `mplfonts`, then common system fonts), registers it and puts it first
in `font.sans-serif`; if none exists, `zh()` returns English labels instead.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib import font_manager

from batchlab.plotting.layout import install_figure_check

try:
    import mplfonts
except ImportError:  # optional: the wheel that ships Noto Sans CJK SC
    mplfonts = None

_STATE: dict[str, object] = {"done": False, "family": None}

_SYSTEM_FAMILIES = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei", "Microsoft YaHei", "PingFang SC", "SimHei", "Heiti SC",
)


def _mplfonts_file() -> Path | None:
    if mplfonts is None:
        return None
    path = Path(mplfonts.__file__).resolve().parent / "fonts" / "NotoSansCJKsc-Regular.otf"
    return path if path.is_file() else None


def setup(style: bool = True) -> str | None:
    """Configure matplotlib for Chinese text; return the CJK family used (None if none exists).

    With `style`, also sets the course's figure defaults (size, dpi, grid). Idempotent. Inside
    IPython it also attaches the figure check (`layout.install_figure_check`) to displayed figures.
    """
    install_figure_check()
    if not _STATE["done"]:
        family = None
        shipped = _mplfonts_file()
        if shipped is not None:
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
        mpl.rcParams.update({
            "figure.figsize": (7.0, 3.8), "figure.dpi": 100, "savefig.dpi": 120,
            "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
        })
    return _STATE["family"]  # type: ignore[return-value]


def cjk_available() -> bool:
    """True when a CJK font is configured (calls `setup` if needed)."""
    if not _STATE["done"]:
        setup(style=False)
    return _STATE["family"] is not None


def zh(cn: str, en: str) -> str:
    """The Chinese label if Chinese can render, else the English one."""
    return cn if cjk_available() else en


def new_axes(ax: object = None, figsize: tuple[float, float] = (7.0, 3.8)) -> object:
    """`ax` itself, or the axes of a new figure (fonts set up) when `ax` is None."""
    setup()
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax
