"""The reference answers, read from the instructor-only solutions (never from the package).

`solution_namespace("lab6")` executes, from `solutions/lab6_*.ipynb`, only the top-level imports,
function and class definitions of every code cell (no server is started, nothing is measured) and
returns the namespace: the solution's own functions, as a learner would have written them.
"""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"


def solution_path(lab: str) -> Path:
    (path,) = sorted(SOLUTIONS.glob(f"{lab}_*.ipynb"))
    return path


@functools.lru_cache(maxsize=None)
def _namespace(lab: str) -> dict[str, Any]:
    nb = json.loads(solution_path(lab).read_text(encoding="utf-8"))
    ns: dict[str, Any] = {"__name__": f"solution_{lab}"}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        tree = ast.parse("\n".join(lines))
        keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))]
        exec(compile(ast.Module(body=keep, type_ignores=[]), f"{lab}-solution", "exec"), ns)
    return ns


def solution_namespace(lab: str) -> dict[str, Any]:
    """A fresh copy of the solution's definitions (see module docstring)."""
    return dict(_namespace(lab))
