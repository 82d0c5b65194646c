"""Plot helpers for the notebooks (matplotlib), one module per chapter plus `fonts` and `layout`.
They draw; they never simulate or measure.
"""

from batchlab.plotting.fonts import cjk_available, setup, zh
from batchlab.plotting.layout import legend

__all__ = ["setup", "zh", "cjk_available", "legend"]
