"""Plot helpers for the notebooks (matplotlib). They draw; they never simulate or measure.

`fonts` (a CJK font so Chinese labels render: `setup`, `zh`), `layout` (legends and the check
that none covers data); one module of figures per chapter: `bottleneck` (01), `speedup` and
`timeline` (02), `padding` (03), `tuning` (04), `evaluation` (05), `engineering` (06), `cases`
(07), `demo` (08), `misconceptions` (09); `source` shows a library object's own source in a
chapter (`show_source`).
"""

from batchlab.plotting.fonts import cjk_available, setup, zh
from batchlab.plotting.layout import legend

__all__ = ["setup", "zh", "cjk_available", "legend"]
