"""Grade a class's submissions of one lab: each ``SUBMISSIONS/<learner>/<lab>*.ipynb`` is rebuilt from
the release, executed in a sandbox, and scored here by replaying each check cell's evidence with
this process's own checks; a gradebook CSV and a Chinese feedback file per learner are written."""

from __future__ import annotations

import csv
import json
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from batchlab.classroom.notebook import GradedQuestion, questions, rebuild
from batchlab.classroom.sandbox import SANDBOX_DIR, Sandbox, run
from batchlab.labs import load_checks
from batchlab.labs._core import EVIDENCE_MIME, Raised, ReplayError, Result, replay
from batchlab.paths import NotebookError, read_notebook

MAX_NOTEBOOK_BYTES = 64 * 2 ** 20
LAB_NAME = re.compile(r"^lab\d+$")


@dataclass
class LearnerGrade:
    """One learner's grade for one lab."""

    learner: str
    lab: str
    questions: list[Result] = field(default_factory=list)
    note: str = ""

    @property
    def total(self) -> int:
        """Points earned."""
        return sum(q.score for q in self.questions)

    @property
    def max_total(self) -> int:
        """Points possible."""
        return sum(q.max_score for q in self.questions)


def release_notebook(release_dir: Path, lab: str) -> tuple[Path, dict[str, Any]]:
    """The released notebook of `lab` (e.g. labs/lab2_dynamic_batching.ipynb)."""
    found = sorted(Path(release_dir).glob(f"{lab}_*.ipynb")) + sorted(Path(release_dir).glob(f"{lab}.ipynb"))
    if len(found) != 1:
        raise NotebookError(f"no single release notebook for {lab} in {release_dir} (found {len(found)})")
    nb = read_notebook(found[0], MAX_NOTEBOOK_BYTES)
    if not questions(nb):
        raise NotebookError(f"{found[0]} carries no nbgrader grade cells: run `make handout`")
    return found[0], nb


def find_submission(folder: Path, lab: str, release_name: str) -> Path | None:
    """``<learner>/<lab>.ipynb`` or ``<learner>/<release name>``; None when the learner has none."""
    for name in (f"{lab}.ipynb", release_name):
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.glob(f"{lab}_*.ipynb"))
    return found[0] if len(found) == 1 else None


def _error_of(cell: dict[str, Any]) -> str:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return Raised(str(out.get("ename", "Error")), str(out.get("evalue") or "")).short()
    return ""


def _evidence(cell: dict[str, Any], qid: str) -> list[Any]:
    evs = [out.get("data", {}).get(EVIDENCE_MIME) for out in cell.get("outputs", [])
           if out.get("output_type") in ("display_data", "execute_result")]
    return [ev for ev in evs if isinstance(ev, dict) and ev.get("qid") == qid]


def score_executed(executed: dict[str, Any], qs: list[GradedQuestion]) -> list[Result]:
    """Each question's score from an executed, rebuilt notebook (evidence replayed here)."""
    cells = {c.get("id"): c for c in executed.get("cells", []) if isinstance(c, dict)}
    info = executed.get("metadata", {}).get("batchlab_execution", {}) or {}
    out = []
    for q in qs:
        raised = [e for e in (_error_of(cells.get(a, {})) for a in q.answer_cells) if e]
        check_cell = cells.get(q.check_cell, {})
        evidence = _evidence(check_cell, q.qid)
        if raised:
            why = f"你的答案那一格运行时抛出了 {raised[0]}，这一题记 0 分。"
        elif evidence:
            try:
                result = replay(evidence[-1])
            except ReplayError as exc:
                why = f"检查格留下的记录无法复核（{exc}），记 0 分。"
            else:
                out.append(Result(q.qid, result.score, result.max_score, result.lines[:-1]))
                continue
        else:
            err = _error_of(check_cell)
            why = (f"检查格运行时出错：{err}" if err else
                   f"没有运行到这道题的检查格（{info.get('reason') or '前面的格子没有运行完'}）") + "，记 0 分。"
        out.append(Result(q.qid, 0, q.points, [f"✗ 第 {q.qid.rsplit('q', 1)[1]} 题：{why}"]))
    return out


@dataclass
class GradeRun:
    """Everything one `grade` call needs."""

    submissions: Path
    lab: str
    release: Path
    sandbox: Sandbox
    cell_timeout: int = 300
    wall_s: float = 1800
    keep: Path | None = None


def grade_one(job: GradeRun, learner: str, path: Path, release: dict[str, Any], qs: list[GradedQuestion]) -> LearnerGrade:
    """Rebuild, execute in the sandbox, score. Raises NotebookError when `path` is not a notebook."""
    submission = read_notebook(path, MAX_NOTEBOOK_BYTES)
    nb = rebuild(release, submission)
    work = Path(tempfile.mkdtemp(prefix=f"batchlab-grade-{job.lab}-"))
    try:
        (work / "submission.ipynb").write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
        cmd = ["-m", "batchlab.classroom.execute", f"{SANDBOX_DIR}/submission.ipynb", f"{SANDBOX_DIR}/executed.ipynb",
               "--cell-timeout", str(job.cell_timeout), "--memory-mb", str(job.sandbox.memory_mb)]
        code, tail = run(job.sandbox, work, cmd, job.wall_s)
        executed_path = work / "executed.ipynb"
        grade = LearnerGrade(learner, job.lab)
        try:
            executed = read_notebook(executed_path, MAX_NOTEBOOK_BYTES)
        except NotebookError:
            executed = {"cells": [], "metadata": {"batchlab_execution": {
                "reason": "整个提交运行超时" if code == -9 else f"执行器没有写出结果（退出码 {code}）"}}}
            grade.note = tail.strip().splitlines()[-1] if tail.strip() else ""
        if [c.get("id") for c in executed.get("cells", [])] not in ([c.get("id") for c in nb["cells"]], []):
            executed = {"cells": [], "metadata": {"batchlab_execution": {"reason": "执行结果与提交的格子对不上"}}}
        grade.questions = score_executed(executed, qs)
        if job.keep is not None and executed_path.exists():
            (job.keep / learner).mkdir(parents=True, exist_ok=True)
            shutil.copy(executed_path, job.keep / learner / f"{job.lab}.ipynb")
        return grade
    finally:
        shutil.rmtree(work, ignore_errors=True)


def feedback_text(grade: LearnerGrade, titles: dict[str, str]) -> str:
    """The learner's feedback file (Markdown, Chinese): score per question and the check's lines."""
    lines = [f"# {grade.lab} 批改结果：{grade.learner}", "", f"总分 **{grade.total} / {grade.max_total}**", ""]
    if grade.note:
        lines += [f"> 注意：{grade.note}", ""]
    for q in grade.questions:
        lines += [f"## {q.qid} {titles.get(q.qid, '')}：{q.score} / {q.max_score}", "", "```",
                  *(q.lines or ["（没有反馈）"]), "```", ""]
    lines.append("分数由讲师的批改程序重新运行你的 notebook 后、在它自己的进程里判定；notebook 里打印的 [score] 行不算数。")
    return "\n".join(lines) + "\n"


def write_gradebook(path: Path, grades: list[LearnerGrade], qs: list[GradedQuestion]) -> None:
    """One row per learner, one column per question, then total and max."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["learner", *[q.qid for q in qs], "total", "max"])
        for g in sorted(grades, key=lambda g: g.learner):
            by = {q.qid: q.score for q in g.questions}
            w.writerow([g.learner, *[by.get(q.qid, 0) for q in qs], g.total, sum(q.points for q in qs)])


def grade(job: GradeRun, csv_path: Path, feedback_dir: Path, jobs: int = 1,
          log: Callable[[str], None] = print) -> tuple[list[LearnerGrade], list[str]]:
    """Grade every learner folder of `job.submissions`; (grades, one line per unreadable submission)."""
    if not LAB_NAME.match(job.lab):
        raise NotebookError(f"--lab must look like lab2, not {job.lab!r}")
    release_path, release = release_notebook(job.release, job.lab)
    qs = questions(release)
    titles = {qid: info["title"] for qid, info in load_checks().items()}
    if not Path(job.submissions).is_dir():
        raise NotebookError(f"no submissions folder {job.submissions}")
    learners = sorted(p for p in Path(job.submissions).iterdir() if p.is_dir() and not p.name.startswith("."))
    bad: list[str] = []

    def one(folder: Path) -> LearnerGrade | None:
        path = find_submission(folder, job.lab, release_path.name)
        if path is None:
            log(f"{folder.name}: no {job.lab} notebook (0 points)")
            return LearnerGrade(folder.name, job.lab, [Result(q.qid, 0, q.points, ["未提交"]) for q in qs], "未提交")
        try:
            g = grade_one(job, folder.name, path, release, qs)
        except NotebookError as exc:
            bad.append(str(exc))
            return None
        log(f"{folder.name}: {g.total}/{g.max_total}")
        return g

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        grades = [g for g in pool.map(one, learners) if g is not None]
    write_gradebook(Path(csv_path), grades, qs)
    feedback_dir = Path(feedback_dir)
    for g in grades:
        (feedback_dir / g.learner).mkdir(parents=True, exist_ok=True)
        (feedback_dir / g.learner / f"{job.lab}.md").write_text(feedback_text(g, titles), encoding="utf-8")
    return grades, bad
