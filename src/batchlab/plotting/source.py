"""A library object's own source, shown in a chapter: the one home of a rule, never a copy.

`show_source(next_batch)` in a notebook cell displays the function exactly as it stands in
`src/batchlab` (coloured in JupyterLab, plain text in the stored output that the tests compare
with the library); `show_side_by_side(a, b)` puts two of them in columns.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

import batchlab

_PACKAGE_ROOT = Path(batchlab.__file__).resolve().parent.parent


class Source:
    """The source of one function or class: `text` (verbatim, dedented), `where` (its file in the repository)."""

    def __init__(self, obj: Any) -> None:
        target = inspect.unwrap(obj)
        try:
            self.text = textwrap.dedent(inspect.getsource(target))
            path = Path(inspect.getsourcefile(target) or "").resolve()
        except (OSError, TypeError) as exc:
            raise ValueError(f"no source to show for {obj!r}: {exc}") from None
        self.name = f"{target.__module__}.{target.__qualname__}"
        rel = path.relative_to(_PACKAGE_ROOT) if path.is_relative_to(_PACKAGE_ROOT) else path
        # the file, not the line: an edit elsewhere in it must not change what a chapter stored
        self.where = f"src/{rel.as_posix()}" if rel != path else str(path)

    @property
    def header(self) -> str:
        """The comment line printed above the source."""
        return f"# {self.name}  ({self.where})"

    def __repr__(self) -> str:
        return f"{self.header}\n{self.text}"

    def _repr_html_(self) -> str:
        body = highlight(self.text, PythonLexer(), HtmlFormatter(noclasses=True, style="friendly"))
        return f"<div><code>{self.header}</code>{body}</div>"


class SideBySide:
    """Several sources in columns (plain text: one after another)."""

    def __init__(self, *objs: Any) -> None:
        self.sources = [Source(o) for o in objs]

    def __repr__(self) -> str:
        return "\n".join(repr(s) for s in self.sources)

    def _repr_html_(self) -> str:
        cols = "".join(f'<div style="flex:1;min-width:0;overflow-x:auto">{s._repr_html_()}</div>'
                       for s in self.sources)
        return f'<div style="display:flex;gap:1em;align-items:flex-start">{cols}</div>'


def show_source(obj: Any) -> Source:
    """The source of `obj` (a function, method or class of the library) for display in a cell."""
    return Source(obj)


def show_side_by_side(*objs: Any) -> SideBySide:
    """The sources of `objs` next to each other, e.g. the article's demo and the course's rule."""
    if len(objs) < 2:
        raise ValueError("show_side_by_side needs at least two objects; use show_source for one")
    return SideBySide(*objs)
