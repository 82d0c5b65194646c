"""Generate the learner labs (`labs/`) from the complete solutions (`solutions/`).

Each answer between ``### BEGIN SOLUTION [hint]`` and ``### END SOLUTION`` becomes a TODO stub
(``raise NotImplementedError("TODO（第 N 题）…")``); question N of lab L is checked by ``labL.qN``.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from batchlab.labs import load_checks
from batchlab.paths import NotebookError, read_notebook

BEGIN = re.compile(r"^(?P<indent>[ \t]*)(?:<!--\s*)?### BEGIN SOLUTION\b(?P<hint>.*?)(?:\s*-->)?\s*$")
END = re.compile(r"^[ \t]*(?:<!--\s*)?### END SOLUTION\b.*$")
CODE_STUB = "# YOUR CODE HERE"
MARKDOWN_STUB = "（在此写下你的答案）"
RAISES_TAG = "raises-exception"
LAB_GLOB = "lab*.ipynb"  # the labs; solutions/ also holds the chapters' exercise answers
BANNER_ID = "labgen-banner"
GENERATED_KEY = "batchlab"


class LabgenError(ValueError):
    """A solution notebook whose answer markers are malformed."""


@dataclass
class LabQuestion:
    """One answer region of a solution notebook."""

    number: int
    kind: str  # "code" or "markdown"


@dataclass
class Lab:
    """A generated lab: its notebook (as a dict) and the questions found in the solution."""

    notebook: dict[str, Any]
    questions: list[LabQuestion] = field(default_factory=list)


def dumps(nb: dict[str, Any]) -> str:
    """Serialise a notebook dict exactly as `nbformat.write` does."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": ")) + "\n"


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def stub_message(number: int, hint: str) -> str:
    """The NotImplementedError message of question `number` (Chinese, then English)."""
    what = hint.strip() or "把这里补完"
    text = f"TODO（第 {number} 题）：{what}，完成后运行下面的检查格 — not yet implemented"
    return json.dumps(text, ensure_ascii=False)  # a valid Python string literal


def replace_regions(source: str, kind: str, number: int, where: str) -> tuple[str, bool]:
    """Stub every solution region of one cell (all of them question `number`); (new source, any region found).
    A region without a hint takes the cell's first hint."""
    out: list[str] = []
    found = inside = False
    first_hint = ""
    for lineno, line in enumerate(source.split("\n"), 1):
        b, e = BEGIN.match(line), END.match(line)
        if b:
            if inside:
                raise LabgenError(f"{where}, line {lineno}: '### BEGIN SOLUTION' inside another solution region")
            found = inside = True
            indent, hint = b.group("indent"), b.group("hint").strip()
            first_hint = first_hint or hint
            if kind == "code":
                out.append(f"{indent}{CODE_STUB}")
                out.append(f"{indent}raise NotImplementedError({stub_message(number, hint or first_hint)})")
            else:
                out.append(f"{indent}{MARKDOWN_STUB}")
            continue
        if e:
            if not inside:
                raise LabgenError(f"{where}, line {lineno}: '### END SOLUTION' without a BEGIN")
            inside = False
            continue
        if not inside:
            out.append(line)
    if inside:
        raise LabgenError(f"{where}: '### BEGIN SOLUTION' is never closed by '### END SOLUTION'")
    return "\n".join(out), found


def banner(solution_name: str) -> dict[str, Any]:
    """The markdown cell that tells a learner how to work in this file."""
    text = (
        "> **学员版**：带 `raise NotImplementedError(\"TODO…\")` 的格子是你的练习：删掉那一行，写出你的代码，"
        "再运行紧跟其后的检查格（`check_…`），它会用中文告诉你对不对、哪里不对，并打印一行 `[score]`"
        "（那一行只给你自己看：讲师批改时会在干净的环境里重新运行整本 notebook，由批改程序判分）。"
        "只改 TODO 所在的格子：其余格子（说明、检查格）批改时会换回原样。\n"
        ">\n"
        "> 可以从任意一格重新开始（Kernel → Restart，然后从头运行到你想去的那格）。"
        "`make handout` 会覆盖本文件：请先另存一份（例如 `my_" + solution_name + "`）或用 git 保存你的作答。"
    )
    return {"cell_type": "markdown", "id": BANNER_ID, "metadata": {"nbgrader": _meta(BANNER_ID)},
            "source": text.splitlines(keepends=True)}


NBGRADER_SCHEMA = 3
_CHECK_CALL = re.compile(r"\b(check_\w+)\s*\(")


def _meta(grade_id: str, grade: bool = False, locked: bool = True, solution: bool = False,
          points: int | None = None) -> dict[str, Any]:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": NBGRADER_SCHEMA,
            "solution": solution, "task": False}
    return meta if points is None else {**meta, "points": points}


def nbgrader_metadata(solution: dict[str, Any], solution_name: str) -> list[dict[str, Any]]:
    """The nbgrader metadata of each cell: answers are ``solution`` (a markdown one a 0-point
    ``-written`` grade), the cell calling question N's check is a locked ``grade`` cell, the rest locked."""
    m = re.match(r"(lab\d+)_", solution_name)
    if not m:
        raise LabgenError(f"{solution_name}: a lab's file name starts with labN_")
    lab = m.group(1)
    checks = {info["function"].__name__: (qid, info["points"]) for qid, info in load_checks().items()}
    out, number = [], 0
    for index, cell in enumerate(solution.get("cells", [])):
        src, code = _source(cell), cell.get("cell_type") == "code"
        called = [checks[n] for n in _CHECK_CALL.findall(src) if n in checks] if code else []
        if "### BEGIN SOLUTION" in src:
            number += 1
            out.append(_meta(f"{lab}-q{number}-answer", locked=False, solution=True) if code else
                       _meta(f"{lab}-q{number}-written", grade=True, locked=False, solution=True, points=0))
        elif called:
            if len(called) != 1 or not called[0][0].startswith(f"{lab}."):
                raise LabgenError(f"{solution_name}, cell {index}: a check cell calls exactly one check of {lab}")
            out.append(_meta(called[0][0].replace(".", "-"), grade=True, points=called[0][1]))
        else:
            out.append(_meta(f"{lab}-{cell.get('id', index)}"))
    return out


def metadata_problems(solution: dict[str, Any], solution_name: str) -> list[str]:
    """Cells of `solution` whose nbgrader metadata is not what `nbgrader_metadata` derives."""
    want = nbgrader_metadata(solution, solution_name)
    return [f"{solution_name}, cell {i} ({cell.get('id')}): nbgrader metadata is not {w['grade_id']}'s"
            for i, (cell, w) in enumerate(zip(solution.get("cells", []), want))
            if cell.get("metadata", {}).get("nbgrader") != w]


def annotate_solutions(solutions: Path) -> list[Path]:
    """Write the derived nbgrader metadata into every solution notebook; the paths changed."""
    changed = []
    for path in sorted(Path(solutions).glob(LAB_GLOB)):
        nb = read_notebook(path)
        for cell, meta in zip(nb.get("cells", []), nbgrader_metadata(nb, path.name)):
            cell.setdefault("metadata", {})["nbgrader"] = meta
        text = dumps(nb)
        if text != path.read_text(encoding="utf-8"):
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def make_lab(solution: dict[str, Any], solution_name: str) -> Lab:
    """The learner version of one solution notebook (a new dict; the input is not changed)."""
    nb = copy.deepcopy(solution)
    if nb.get("nbformat") != 4:
        raise LabgenError(f"{solution_name}: only nbformat 4 notebooks are supported")
    for cell, meta in zip(nb.get("cells", []), nbgrader_metadata(solution, solution_name)):
        cell.setdefault("metadata", {})["nbgrader"] = meta
    questions: list[LabQuestion] = []
    cells = nb.get("cells", [])
    for index, cell in enumerate(cells):
        kind = cell.get("cell_type")
        cell["metadata"] = {k: v for k, v in cell.get("metadata", {}).items()
                            if k not in ("execution", "collapsed", "scrolled", "ExecuteTime")}
        src = _source(cell)
        if kind in ("code", "markdown") and ("### BEGIN SOLUTION" in src or "### END SOLUTION" in src):
            new, found = replace_regions(src, kind, len(questions) + 1, f"{solution_name}, cell {index}")
            if found:
                questions.append(LabQuestion(len(questions) + 1, kind))
                tags = cell["metadata"].get("tags", [])
                if kind == "code" and RAISES_TAG not in tags:
                    cell["metadata"]["tags"] = [*tags, RAISES_TAG]
            cell["source"] = new.splitlines(keepends=True)
        if kind == "code":
            cell["outputs"], cell["execution_count"] = [], None
    cells.insert(1 if cells and cells[0].get("cell_type") == "markdown" else 0, banner(solution_name))
    nb["cells"] = cells
    meta = {k: v for k, v in nb.get("metadata", {}).items() if k in ("kernelspec", "language_info")}
    nb["metadata"] = {**meta, GENERATED_KEY: {"generated_by": "make handout", "questions": len(questions)}}
    return Lab(nb, questions)


def generate_labs(solutions: Path, labs: Path) -> dict[Path, str]:
    """{lab path: text} for every `*.ipynb` in `solutions` (nothing is written)."""
    solutions, labs = Path(solutions), Path(labs)
    if not solutions.is_dir():
        raise LabgenError(f"solutions folder {solutions} does not exist")
    return {labs / p.name: dumps(make_lab(read_notebook(p), p.name).notebook) for p in sorted(solutions.glob(LAB_GLOB))}


def _is_generated(path: Path) -> bool:
    try:
        return GENERATED_KEY in read_notebook(path).get("metadata", {})
    except NotebookError:
        return False


def _normalise(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


def stale(solutions: Path, labs: Path) -> list[str]:
    """'path (reason)' for each lab that differs (beyond trailing whitespace) from what `generate_labs` writes."""
    wanted = generate_labs(solutions, labs)
    problems = [f"{path} ({len(found)} cells without their nbgrader metadata: run labgen --annotate)"
                for path in sorted(Path(solutions).glob(LAB_GLOB))
                if (found := metadata_problems(read_notebook(path), path.name))]
    for path, text in wanted.items():
        if not path.exists():
            problems.append(f"{path} (missing)")
        elif _normalise(path.read_text(encoding="utf-8")) != _normalise(text):
            problems.append(f"{path} (differs from its solution)")
    for path in sorted(Path(labs).glob(LAB_GLOB)) if Path(labs).is_dir() else []:
        if path not in wanted:
            problems.append(f"{path} (no solution of that name)")
    return problems


def write(solutions: Path, labs: Path) -> list[Path]:
    """Write every lab; remove generated labs whose solution is gone. Returns the paths written."""
    wanted = generate_labs(solutions, labs)
    Path(labs).mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in wanted.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    for path in sorted(Path(labs).glob(LAB_GLOB)):
        if path not in wanted and _is_generated(path):
            path.unlink()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: write labs/ from solutions/, or with --check list stale labs and exit 1."""
    p = argparse.ArgumentParser(prog="python -m batchlab.tools.labgen", description=__doc__.splitlines()[0])
    p.add_argument("solutions", type=Path, help="folder of complete solution notebooks")
    p.add_argument("labs", type=Path, help="folder of generated learner notebooks")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if labs/ is out of date")
    p.add_argument("--annotate", action="store_true", help="write the solutions' nbgrader metadata first")
    args = p.parse_args(argv)
    try:
        if args.annotate:
            for path in annotate_solutions(args.solutions):
                print(f"annotated {path}")
        if args.check:
            problems = stale(args.solutions, args.labs)
            if problems:
                print("labs/ is out of date; run `make handout`:", *(f"  {line}" for line in problems),
                      sep="\n", file=sys.stderr)
                return 1
            print(f"labs/ is in sync with {args.solutions}/")
            return 0
        written = write(args.solutions, args.labs)
        for path in written:
            print(f"wrote {path}")
        if not written:
            print("labs/ already up to date")
        return 0
    except (LabgenError, NotebookError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
