"""Plot helpers for the notebooks (matplotlib). They draw; they never simulate or measure.

`setup()` configures a CJK font so Chinese labels render on any machine; `zh(cn, en)` picks the
Chinese label when a CJK font is available and the English one otherwise.
"""

from batchlab.plotting.fonts import cjk_available, setup, zh
from batchlab.plotting.layout import legend

__all__ = ["setup", "zh", "cjk_available", "legend"]
