"""Generate the learner labs (`labs/`) from the complete solutions (`solutions/`).

One source, two versions. A solution notebook marks each answer the way nbgrader does::

    def dynamic_batching_block(delay_us: int) -> str:
        ### BEGIN SOLUTION 写出 dynamic_batching 块
        return f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}"
        ### END SOLUTION

In the learner version the region becomes a stub, indentation kept::

    def dynamic_batching_block(delay_us: int) -> str:
        # YOUR CODE HERE
        raise NotImplementedError("TODO（第 1 题）：写出 dynamic_batching 块 — not yet implemented")

Text after ``### BEGIN SOLUTION`` is an optional hint that goes into the message. A markdown
answer between the same markers becomes "（在此写下你的答案）". Questions are numbered in
notebook order (code and markdown answers share the count); the check for question N of lab L
has the id ``labL.qN`` (see `batchlab.labs`).

In every lab:

* no cell keeps outputs or execution counts (like fastbook's clean copies): the file depends on
  the solution's source only, so the staleness check is stable;
* every cell with a code stub (a "TODO cell") is tagged ``raises-exception``, so nbval runs the
  lab end to end and the only cells allowed to fail are the learner's own TODOs;
* a banner cell after the title says that it is generated and how to keep one's work.

The solutions carry nbgrader metadata (schema 3), so nbgrader and `batchlab.classroom` read
the same labs: an answer cell is ``solution`` (grade_id ``labL-qN-answer``), the cell that calls
question N's check is an autograded, locked ``grade`` cell (grade_id ``labL-qN``, the check's
points), and every other cell is locked (read-only). `annotate_solutions` derives that metadata from the
markers and the check calls; the lab copies it.

    python -m batchlab.tools.labgen solutions labs             # write labs/ (make handout)
    python -m batchlab.tools.labgen solutions labs --check     # exit 1 listing stale labs or metadata (CI)
    python -m batchlab.tools.labgen solutions labs --annotate  # (re)write the solutions' nbgrader metadata
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

BEGIN = re.compile(r"^(?P<indent>[ \t]*)(?:<!--\s*)?### BEGIN SOLUTION\b(?P<hint>.*?)(?:\s*-->)?\s*$")
END = re.compile(r"^[ \t]*(?:<!--\s*)?### END SOLUTION\b.*$")
CODE_STUB = "# YOUR CODE HERE"
MARKDOWN_STUB = "（在此写下你的答案）"
RAISES_TAG = "raises-exception"
BANNER_ID = "labgen-banner"
GENERATED_KEY = "batchlab"


class LabgenError(ValueError):
    """A solution notebook whose answer markers are malformed."""


@dataclass
class LabQuestion:
    """One answer region of a solution notebook."""

    number: int
    cell_index: int
    kind: str  # "code" or "markdown"
    hint: str = ""


@dataclass
class Lab:
    """A generated lab: its notebook (as a dict) and the questions found in the solution."""

    notebook: dict[str, Any]
    questions: list[LabQuestion] = field(default_factory=list)

    def text(self) -> str:
        """The notebook as nbformat writes it (indent 1, sorted keys, UTF-8 kept)."""
        return dumps(self.notebook)


def dumps(nb: dict[str, Any]) -> str:
    """Serialise a notebook dict exactly as `nbformat.write` does."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": ")) + "\n"


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _split_source(text: str) -> list[str]:
    """The list-of-lines form nbformat stores (each line keeps its newline)."""
    return text.splitlines(keepends=True)


def stub_message(number: int, hint: str) -> str:
    """The NotImplementedError message of question `number` (Chinese, then English)."""
    what = hint.strip() or "把这里补完"
    text = f"TODO（第 {number} 题）：{what}，完成后运行下面的检查格 — not yet implemented"
    return json.dumps(text, ensure_ascii=False)  # a valid Python string literal


def replace_regions(source: str, kind: str, first_number: int, where: str) -> tuple[str, list[tuple[int, str]]]:
    """Replace every solution region of one cell's source; return (new source, [(number, hint)]).

    All regions of one cell belong to one question (`first_number`).
    """
    out: list[str] = []
    found: list[tuple[int, str]] = []
    inside = False
    for lineno, line in enumerate(source.split("\n"), 1):
        b, e = BEGIN.match(line), END.match(line)
        if b:
            if inside:
                raise LabgenError(f"{where}, line {lineno}: '### BEGIN SOLUTION' inside another solution region")
            inside = True
            indent, hint = b.group("indent"), b.group("hint").strip()
            if not found:
                found.append((first_number, hint))
            elif hint and not found[0][1]:
                found[0] = (first_number, hint)
            if kind == "code":
                out.append(f"{indent}{CODE_STUB}")
                out.append(f"{indent}raise NotImplementedError({stub_message(first_number, hint or found[0][1])})")
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
    return {"cell_type": "markdown", "id": BANNER_ID, "metadata": {"nbgrader": _locked(BANNER_ID)},
            "source": _split_source(text)}


NBGRADER_SCHEMA = 3
_CHECK_CALL = re.compile(r"\b(check_\w+)\s*\(")


def _locked(grade_id: str) -> dict[str, Any]:
    return {"grade": False, "grade_id": grade_id, "locked": True, "schema_version": NBGRADER_SCHEMA,
            "solution": False, "task": False}


def _lab_id(solution_name: str) -> str:
    m = re.match(r"(lab\d+)_", solution_name)
    if not m:
        raise LabgenError(f"{solution_name}: a lab's file name starts with labN_")
    return m.group(1)


def nbgrader_metadata(solution: dict[str, Any], solution_name: str) -> list[dict[str, Any]]:
    """The nbgrader metadata each cell of `solution` should carry (see module docstring)."""
    lab = _lab_id(solution_name)
    checks = {info["function"].__name__: (qid, info["points"]) for qid, info in load_checks().items()}
    out, number = [], 0
    for index, cell in enumerate(solution.get("cells", [])):
        src = _source(cell)
        cid = str(cell.get("id", index))
        if "### BEGIN SOLUTION" in src:
            number += 1
            if cell.get("cell_type") == "code":
                out.append({"grade": False, "grade_id": f"{lab}-q{number}-answer", "locked": False,
                            "schema_version": NBGRADER_SCHEMA, "solution": True, "task": False})
            else:  # a written answer: graded by the instructor, not by the checks
                out.append({"grade": True, "grade_id": f"{lab}-q{number}-written", "locked": False, "points": 0,
                            "schema_version": NBGRADER_SCHEMA, "solution": True, "task": False})
            continue
        called = [checks[n] for n in _CHECK_CALL.findall(src) if n in checks] if cell.get("cell_type") == "code" else []
        if called:
            if len(called) != 1 or not called[0][0].startswith(f"{lab}."):
                raise LabgenError(f"{solution_name}, cell {index}: a check cell calls exactly one check of {lab}")
            qid, points = called[0]
            out.append({"grade": True, "grade_id": qid.replace(".", "-"), "locked": True, "points": points,
                        "schema_version": NBGRADER_SCHEMA, "solution": False, "task": False})
            continue
        out.append(_locked(f"{lab}-{cid}"))
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
    for path in sorted(Path(solutions).glob("*.ipynb")):
        nb = read_notebook(path)
        for cell, meta in zip(nb.get("cells", []), nbgrader_metadata(nb, path.name)):
            cell.setdefault("metadata", {})["nbgrader"] = meta
        text = dumps(nb)
        if text != path.read_text(encoding="utf-8"):
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def _clean_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in meta.items() if k not in ("execution", "collapsed", "scrolled", "ExecuteTime")}
    return meta


def make_lab(solution: dict[str, Any], solution_name: str) -> Lab:
    """The learner version of one solution notebook (a new dict; the input is not changed)."""
    nb = copy.deepcopy(solution)
    if nb.get("nbformat") != 4:
        raise LabgenError(f"{solution_name}: only nbformat 4 notebooks are supported")
    for cell, meta in zip(nb.get("cells", []), nbgrader_metadata(solution, solution_name)):
        cell.setdefault("metadata", {})["nbgrader"] = meta
    questions: list[LabQuestion] = []
    cells: list[dict[str, Any]] = []
    for index, cell in enumerate(nb.get("cells", [])):
        kind = cell.get("cell_type")
        cell["metadata"] = _clean_metadata(cell.get("metadata", {}))
        if kind in ("code", "markdown"):
            src = _source(cell)
            if BEGIN.search(src) or END.search(src) or "### BEGIN SOLUTION" in src or "### END SOLUTION" in src:
                where = f"{solution_name}, cell {index}"
                new, found = replace_regions(src, kind, len(questions) + 1, where)
                if found:
                    number, hint = found[0]
                    questions.append(LabQuestion(number, index, kind, hint))
                    if kind == "code":
                        tags = list(cell["metadata"].get("tags", []))
                        if RAISES_TAG not in tags:
                            tags.append(RAISES_TAG)
                        cell["metadata"]["tags"] = tags
                cell["source"] = _split_source(new)
        if kind == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cells.append(cell)
    insert_at = 1 if cells and cells[0].get("cell_type") == "markdown" else 0
    cells.insert(insert_at, banner(solution_name))
    nb["cells"] = cells
    meta = {k: v for k, v in nb.get("metadata", {}).items() if k in ("kernelspec", "language_info")}
    meta[GENERATED_KEY] = {"generated_by": "make handout", "questions": len(questions)}
    nb["metadata"] = meta
    return Lab(nb, questions)


def read_notebook(path: Path) -> dict[str, Any]:
    """A notebook file as a plain dict (no validation, no id rewriting)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LabgenError(f"{path}: not a valid notebook (JSON error at line {exc.lineno})") from None


def generate_labs(solutions: Path, labs: Path) -> dict[Path, str]:
    """{lab path: text} for every `*.ipynb` in `solutions` (nothing is written)."""
    solutions, labs = Path(solutions), Path(labs)
    if not solutions.is_dir():
        raise LabgenError(f"solutions folder {solutions} does not exist")
    out: dict[Path, str] = {}
    for path in sorted(solutions.glob("*.ipynb")):
        out[labs / path.name] = make_lab(read_notebook(path), path.name).text()
    return out


def _normalise(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


def _is_generated(path: Path) -> bool:
    try:
        return GENERATED_KEY in json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        return False


def stale(solutions: Path, labs: Path) -> list[str]:
    """Lab files that differ from what `generate_labs` would write ('path (reason)'); [] if in sync.

    The comparison ignores trailing whitespace only.
    """
    wanted = generate_labs(solutions, labs)
    problems = []
    for path in sorted(Path(solutions).glob("*.ipynb")):
        found = metadata_problems(read_notebook(path), path.name)
        if found:
            problems.append(f"{path} ({len(found)} cells without their nbgrader metadata: run labgen --annotate)")
    for path, text in wanted.items():
        if not path.exists():
            problems.append(f"{path} (missing)")
        elif _normalise(path.read_text(encoding="utf-8")) != _normalise(text):
            problems.append(f"{path} (differs from its solution)")
    for path in sorted(Path(labs).glob("*.ipynb")) if Path(labs).is_dir() else []:
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
    for path in sorted(Path(labs).glob("*.ipynb")):
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
                print("labs/ is out of date; run `make handout`:", file=sys.stderr)
                for line in problems:
                    print(f"  {line}", file=sys.stderr)
                return 1
            print(f"labs/ is in sync with {args.solutions}/")
            return 0
        written = write(args.solutions, args.labs)
        for path in written:
            print(f"wrote {path}")
        if not written:
            print("labs/ already up to date")
        return 0
    except LabgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
