"""The chapters show the batchers' own source, never a copy: every `show_source(...)` output stored in
a notebook equals the library's current source, and chapters 02 and 03 show the three mechanisms.

Read with `json` only (nothing is executed): the stored output is what a learner opening the chapter
sees, so it must not have drifted from `src/batchlab` since the notebook was last executed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from batchlab.plotting.source import Source, show_side_by_side, show_source

from test_architecture import MECHANISMS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
HEADER = re.compile(r"^# (?P<name>[\w.]+)  \((?P<where>[^)\n]*)\)$", re.M)


def _resolve(name: str) -> Any:
    """The object a dotted name (module path, then attributes) refers to."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def _shown(path: Path) -> list[tuple[int, str, str]]:
    """(cell index, shown object's name, shown text) for every show_source output stored in `path`."""
    return _shown_text(json.loads(path.read_text(encoding="utf-8")), path)


def _shown_text(nb: dict, path: Path) -> list[tuple[int, str, str]]:
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or not re.search(r"show_(source|side_by_side)\(", "".join(cell["source"])):
            continue
        texts = ["".join(o["data"]["text/plain"]) for o in cell.get("outputs", [])
                 if "text/plain" in o.get("data", {})]
        assert texts, f"{path.name} cell {i} calls show_source but stores no output: re-execute it"
        for text in texts:
            heads = list(HEADER.finditer(text))
            assert heads and heads[0].start() == 0, \
                f"{path.name} cell {i}: stored output does not start with show_source's header: {text[:80]!r}"
            for m, nxt in zip(heads, heads[1:] + [None]):   # show_side_by_side: one source after another
                body = text[m.end() + 1:] if nxt is None else text[m.end() + 1:nxt.start() - 1]
                out.append((i, m["name"], body))
    return out


def _calls_show(path: Path) -> bool:
    return bool(re.search(r"show_(source|side_by_side)\(", path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if _calls_show(p)], ids=lambda p: p.name)
def test_shown_source_is_the_library_source(path: Path) -> None:
    for i, name, body in _shown(path):
        want = textwrap.dedent(inspect.getsource(_resolve(name)))
        # (Jupyter stores a repr without its final newline)
        assert body.rstrip("\n") == want.rstrip("\n"), f"{path.name} cell {i} shows an old {name}: re-execute the notebook"


def test_chapters_02_and_03_show_the_three_mechanisms() -> None:
    shown = {name for p in NOTEBOOKS if p.name[:3] in ("02_", "03_") for _, name, _ in _shown(p)}
    missing = [f"{module}.{name}" for module, names in MECHANISMS.values() for name in names
               if f"{module}.{name}" not in shown]
    assert not missing, f"chapters 02 and 03 do not show: {missing}"


def test_a_drifted_copy_is_caught(tmp_path: Path) -> None:
    module, names = next(iter(MECHANISMS.values()))
    name = f"{module}.{names[0]}"
    text = repr(show_source(_resolve(name))).replace("\n", "\n# edited\n", 2)
    nb = {"cells": [{"cell_type": "code", "source": ["show_source(x)"], "metadata": {},
                     "outputs": [{"output_type": "execute_result", "data": {"text/plain": text}}]}]}
    (tmp_path / "x.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(AssertionError, match="shows an old"):
        test_shown_source_is_the_library_source(tmp_path / "x.ipynb")


def test_show_source_refuses_what_has_no_source() -> None:
    with pytest.raises(ValueError, match="no source to show"):
        Source(len)
    with pytest.raises(ValueError, match="at least two"):
        show_side_by_side(Source)


def test_side_by_side_is_read_back_as_each_source() -> None:
    text = repr(show_side_by_side(Source, show_source))
    nb = {"cells": [{"cell_type": "code", "source": ["show_side_by_side(a, b)"], "metadata": {},
                     "outputs": [{"output_type": "execute_result", "data": {"text/plain": text}}]}]}
    path = Path(__file__).with_name("_side_by_side.ipynb")
    names = [name for _, name, body in _shown_text(nb, path)
             if body.rstrip("\n") == textwrap.dedent(inspect.getsource(_resolve(name))).rstrip("\n")]
    assert names == ["batchlab.plotting.source.Source", "batchlab.plotting.source.show_source"]
