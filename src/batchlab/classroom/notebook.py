"""A submission rebuilt for grading from its release: the learner's answer cells (nbgrader
``solution``) and added cells kept, every locked cell put back exactly as released, outputs dropped."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

GRADE_ID = re.compile(r"^(lab\d+)-q(\d+)$")
ANSWER_ID = re.compile(r"^(lab\d+)-q(\d+)-answer$")


def nbgrader(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's nbgrader metadata ({} when it has none)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


@dataclass
class GradedQuestion:
    """One autograded question of a release: its check id, points, and cells."""

    qid: str
    points: int
    check_cell: str                     # the id of its locked check cell
    answer_cells: list[str] = field(default_factory=list)


def questions(release: dict[str, Any]) -> list[GradedQuestion]:
    """The autograded questions of a release notebook, in notebook order."""
    out: dict[str, GradedQuestion] = {}
    answers: dict[str, list[str]] = {}
    for cell in release.get("cells", []):
        meta = nbgrader(cell)
        gid = str(meta.get("grade_id", ""))
        m = GRADE_ID.match(gid)
        if m and meta.get("grade") and cell.get("cell_type") == "code":
            qid = f"{m.group(1)}.q{m.group(2)}"
            out[qid] = GradedQuestion(qid, int(meta.get("points", 0)), cell["id"])
        a = ANSWER_ID.match(gid)
        if a and meta.get("solution") and cell.get("cell_type") == "code":
            answers.setdefault(f"{a.group(1)}.q{a.group(2)}", []).append(cell["id"])
    for qid, q in out.items():
        q.answer_cells = answers.get(qid, [])
    return list(out.values())


def _clean(cell: dict[str, Any]) -> dict[str, Any]:
    cell = copy.deepcopy(cell)
    if cell.get("cell_type") == "code":
        cell["outputs"] = []
        cell["execution_count"] = None
    cell.setdefault("metadata", {})
    return cell


def rebuild(release: dict[str, Any], submission: dict[str, Any]) -> dict[str, Any]:
    """The notebook to execute: locked cells from `release`, answers and added cells from `submission`."""
    by_id = {c["id"]: c for c in release.get("cells", []) if isinstance(c, dict) and "id" in c}
    order = [c["id"] for c in release.get("cells", []) if "id" in c]
    placed: set[str] = set()
    cells: list[dict[str, Any]] = []
    extra = 0
    for cell in submission.get("cells", []):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            continue
        cid = cell.get("id")
        if cid in by_id and cid not in placed:
            placed.add(cid)
            mine = by_id[cid]
            kept = _clean(mine)
            if nbgrader(mine).get("solution") and cell.get("cell_type") == mine.get("cell_type"):
                src = cell.get("source", "")
                kept["source"] = "".join(src) if isinstance(src, list) else str(src)
            cells.append(kept)
            continue
        extra += 1
        own = _clean({k: cell.get(k) for k in ("cell_type", "source") if k in cell})
        own["id"] = f"learner-{extra}"
        if own.get("cell_type") == "code":
            own.setdefault("source", "")
        cells.append(own)
    for pos, cid in enumerate(order):           # locked cells the learner deleted or re-labelled
        if cid in placed:
            continue
        before = [c for c in order[:pos] if c in placed]
        at = next(i + 1 for i, c in enumerate(cells) if c.get("id") == before[-1]) if before else 0
        cells.insert(at, _clean(by_id[cid]))
        placed.add(cid)
    nb = {k: copy.deepcopy(v) for k, v in release.items() if k != "cells"}
    nb["cells"] = cells
    return nb
