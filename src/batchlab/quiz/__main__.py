"""Command line: grade submissions, print a bank, check or sync bank files.

    python -m batchlab.quiz grade FILE [FILE...] [--bank interview] [--csv OUT]
    python -m batchlab.quiz show [--bank interview] [--answers] [--learner ID | --seed N]
    python -m batchlab.quiz check [BANK_FILE...]
    python -m batchlab.quiz sync [BANK_FILE...]

`grade` prints one JSON object per valid file on stdout and one line per bad file on stderr;
it exits 0 when every file was valid, 2 otherwise. Usage errors: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from batchlab.quiz.bank import list_banks, load_all, load_bank, quiz_dir, sync_file
from batchlab.quiz.grade import grade_files, write_csv
from batchlab.quiz.session import render_text

PROG = "python -m batchlab.quiz"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage wall
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def _fail(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


def _cmd_grade(args: argparse.Namespace) -> int:
    try:
        reports, errors = grade_files(args.files, args.bank)
    except ValueError as e:  # a bad --bank: nothing can be graded
        return _fail(str(e))
    by_file = {r["file"]: r for r in reports}
    bad = dict(errors)
    for f in args.files:
        f = str(f)
        if f in by_file:
            print(json.dumps(by_file[f], ensure_ascii=False))
        elif f in bad:
            print(f"{f}: {bad[f]}", file=sys.stderr)
    if args.csv:
        try:
            write_csv(args.csv, reports, errors, order=[str(f) for f in args.files])
        except OSError as e:
            return _fail(f"cannot write {args.csv}: {e.strerror or e}")
    return 2 if errors else 0


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        text = render_text(args.bank, seed=args.seed, learner=args.learner, answers=args.answers)
    except ValueError as e:
        return _fail(str(e))
    sys.stdout.write(text)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        if args.files:
            banks = {str(p): load_bank(p) for p in args.files}
        else:
            banks = load_all()
            if not banks:
                return _fail(f"no banks in {quiz_dir()}")
    except ValueError as e:
        return _fail(str(e))
    for b in banks.values():
        kinds = {k: sum(q.kind == k for q in b) for k in ("single", "multi", "numeric")}
        seeded = sum(q.seeded for q in b)
        print(f"ok {b.name}: {len(b)} questions ({kinds['single']} single, {kinds['multi']} multi, "
              f"{kinds['numeric']} numeric of which {seeded} seeded)")
    return 0


def _cmd_sync(args: argparse.Namespace) -> int:
    files = args.files or [quiz_dir() / f"{n}.json" for n in list_banks()]
    for f in files:
        try:
            n = sync_file(f)
        except ValueError as e:
            return _fail(str(e))
        print(f"synced {f}: {n} questions")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    p = _Parser(prog=PROG, description="batchlab quizzes: grade submissions, show or check banks")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    g = sub.add_parser("grade", help="grade submission JSON files")
    g.add_argument("files", nargs="+", metavar="FILE")
    g.add_argument("--bank", default=None,
                   help="bank to grade against (default: each file's _bank, else interview)")
    g.add_argument("--csv", metavar="OUT", help="also write one CSV row per file")
    g.set_defaults(func=_cmd_grade)
    s = sub.add_parser("show", help="print a bank's questions for self-study")
    s.add_argument("--bank", default="interview")
    s.add_argument("--answers", action="store_true", help="also print keys and explanations")
    who = s.add_mutually_exclusive_group()
    who.add_argument("--learner", help="learner id: seeds the numeric questions")
    who.add_argument("--seed", type=int, help="seed for the numeric questions")
    s.set_defaults(func=_cmd_show)
    c = sub.add_parser("check", help="validate banks (default: all in quiz/)")
    c.add_argument("files", nargs="*", metavar="BANK_FILE", type=Path)
    c.set_defaults(func=_cmd_check)
    y = sub.add_parser("sync", help="fill the jupyterquiz fields derived from ours (authors)")
    y.add_argument("files", nargs="*", metavar="BANK_FILE", type=Path)
    y.set_defaults(func=_cmd_sync)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    if getattr(args, "seed", None) is not None and args.seed < 0:
        return _fail("--seed must be a non-negative integer")
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `... show | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
