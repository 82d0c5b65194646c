"""`python -m batchlab.classroom grade SUBMISSIONS --lab lab2 --csv grades.csv` (and `check-sandbox`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from batchlab.classroom.grade import GradeRun, grade
from batchlab.paths import NotebookError
from batchlab.classroom.sandbox import SANDBOX_KINDS, SandboxError, pick


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: exit 2 naming each unreadable submission (the others are still graded)."""
    p = argparse.ArgumentParser(prog="python -m batchlab.classroom", description="grade the labs of a class")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="grade SUBMISSIONS/<learner>/<lab>.ipynb")
    g.add_argument("submissions", type=Path)
    g.add_argument("--lab", required=True, help="lab1 … lab6")
    g.add_argument("--csv", type=Path, required=True, help="gradebook to write")
    g.add_argument("--feedback", type=Path, default=None, help="folder for <learner>/<lab>.md (default: feedback/ beside the CSV)")
    g.add_argument("--release", type=Path, default=Path("labs"), help="the handed-out notebooks (default labs/)")
    g.add_argument("--sandbox", choices=SANDBOX_KINDS, default="auto")
    g.add_argument("--image", default="", help="container image with the course installed (docker/podman)")
    g.add_argument("--memory-mb", type=int, default=3072, help="memory limit of one submission's kernel")
    g.add_argument("--cell-timeout", type=int, default=300, help="seconds one cell may run")
    g.add_argument("--timeout", type=int, default=1800, help="seconds one whole submission may run")
    g.add_argument("--jobs", type=int, default=1, help="submissions graded at once")
    g.add_argument("--keep", type=Path, default=None, help="keep the executed notebooks here")
    c = sub.add_parser("check-sandbox", help="say which sandbox grading would use here")
    c.add_argument("--sandbox", choices=SANDBOX_KINDS, default="auto")
    c.add_argument("--image", default="")
    args = p.parse_args(argv)
    try:
        box = pick(args.sandbox, args.image, getattr(args, "memory_mb", 3072))
    except SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "check-sandbox":
        print(json.dumps({"sandbox": box.kind, "image": box.image or None}))
        return 0
    job = GradeRun(args.submissions, args.lab, args.release, box, args.cell_timeout, args.timeout, args.keep)
    feedback = args.feedback if args.feedback is not None else args.csv.parent / "feedback"
    try:
        grades, bad = grade(job, args.csv, feedback, jobs=args.jobs,
                            log=lambda line: print(line, file=sys.stderr, flush=True))
    except NotebookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for g in grades:
        print(json.dumps({"learner": g.learner, "lab": g.lab, "total": g.total, "max": g.max_total,
                          "scores": {q.qid: q.score for q in g.questions}}, ensure_ascii=False))
    print("".join(f"error: {line}\n" for line in bad), end="", file=sys.stderr)
    print(f"sandbox {box.kind}; {len(grades)} graded, {len(bad)} unreadable; gradebook {args.csv}, feedback {feedback}/",
          file=sys.stderr)
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
