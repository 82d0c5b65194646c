"""The notebooks share one shape: short code cells, one heading form, one set of module aliases.

Read with `json` and `ast` only (nothing is executed), so these tests are fast.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_LINES = 15

#: Module -> the one name it is imported as, in every notebook.
ALIASES = {
    "batchlab.theory.formulas": "F",
    "batchlab.theory.queueing": "Q",
    "batchlab.theory.padding": "P",
    "batchlab.course.tuning": "T",
    "batchlab.course.cases": "C",
    "batchlab.course.engineering": "E",
    "batchlab.course.misconceptions": "M",
    "batchlab.course.seed_redo": "R",
    "batchlab.course.capacity": "K",
    "batchlab.course.interview": "IE",
    "batchlab.course.seed_demo": "sd",
    "batchlab.plotting": "plotting",
}
PLOTS = "plots"  # every chapter plotting module, batchlab.plotting.<topic>
RESERVED = set(ALIASES.values()) | {PLOTS}


def _cells(path: Path, kind: str) -> list[tuple[int, str]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(i, "".join(c["source"])) for i, c in enumerate(nb["cells"]) if c["cell_type"] == kind]


def _python(source: str) -> str:
    """The cell without IPython magics and shell escapes."""
    return "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!")))


def _imports(tree: ast.AST) -> list[tuple[str, str]]:
    """(module, bound name) for every module imported in `tree`, e.g. ("batchlab.theory.padding", "P")."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, a.asname or a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [(f"{node.module}.{a.name}", a.asname or a.name) for a in node.names]
    return out


def _other_bindings(tree: ast.AST) -> set[str]:
    """Names bound in `tree` other than by an import (assignments, loops, defs, arguments, except-as)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _is_plotting_topic(module: str) -> bool:
    """True for a module batchlab.plotting.<topic> (not for a function imported from batchlab.plotting)."""
    parts = module.split(".")
    return (len(parts) == 3 and parts[:2] == ["batchlab", "plotting"]
            and (ROOT / "src" / "batchlab" / "plotting" / f"{parts[2]}.py").is_file())


def test_the_notebooks_are_found() -> None:
    assert len(CHAPTERS) == 12 and len(NOTEBOOKS) > len(CHAPTERS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_code_cells_are_short(path: Path) -> None:
    long = [f"cell {i}: {len(s.splitlines())} lines" for i, s in _cells(path, "code")
            if len(s.splitlines()) > MAX_LINES]
    assert not long, f"{path.name}: code cells over {MAX_LINES} lines (split them): {long}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_opens_with_navigation_heading_and_goals(path: Path) -> None:
    n = int(path.name[:2])
    nb = json.loads(path.read_text(encoding="utf-8"))
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown"
    text = "".join(first["source"])
    lines = text.splitlines()
    assert lines[0].startswith("[") and "(index.ipynb)" in lines[0], f"{path.name}: first line is not the navigation"
    headings = [ln for ln in lines if ln.startswith("# ")]
    assert headings and re.match(rf"# 第 {n} 章 \S", headings[0]), f"{path.name}: heading {headings[:1]}"
    assert "**本章目标**" in text, f"{path.name}: the first cell has no 本章目标"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_module_aliases_follow_the_convention(path: Path) -> None:
    problems = []
    for i, source in _cells(path, "code"):
        tree = ast.parse(_python(source))
        for module, name in _imports(tree):
            want = PLOTS if _is_plotting_topic(module) else ALIASES.get(module)
            if want is not None and name != want:
                problems.append(f"cell {i}: {module} imported as {name}, should be {want}")
            elif want is None and name in RESERVED:
                problems.append(f"cell {i}: {name} is reserved, but bound to {module}")
        for name in sorted(_other_bindings(tree) & RESERVED):
            problems.append(f"cell {i}: {name} is a module alias, but assigned here")
    for i, source in _cells(path, "markdown"):  # code shown in prose follows the same rule
        for _module, name in re.findall(r"from (batchlab\.plotting)\.\w+ import \w+ as (\w+)", source):
            if name != PLOTS:
                problems.append(f"markdown cell {i}: a plotting module shown as {name}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_rules_catch_a_wrong_alias() -> None:
    tree = ast.parse("from batchlab.plotting import cases as P\nfrom batchlab.theory import padding as P\nK = 16")
    assert ("batchlab.plotting.cases", "P") in _imports(tree)
    assert _is_plotting_topic("batchlab.plotting.cases") and not _is_plotting_topic("batchlab.plotting.zh")
    assert "K" in _other_bindings(tree)
