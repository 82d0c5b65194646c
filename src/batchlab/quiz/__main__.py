"""Command line (`python -m batchlab.quiz --help`): grade submissions, item statistics, export or
print a bank, remember the learner id, check or sync banks. Every usage error and bad file is one
line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from batchlab._validate import CliParser
from batchlab.quiz.audit import audit, blind_scores, key_positions
from batchlab.quiz.bank import list_banks, load_all, load_bank, quiz_dir, sync_file
from batchlab.quiz.export import moodle_xml, qti_package
from batchlab.quiz.grade import grade_files, write_csv
from batchlab.quiz.learner import current_learner, forget_learner, learner_file, remember_learner
from batchlab.quiz.safe_json import display_name
from batchlab.quiz.session import render_text
from batchlab.quiz.stats import item_stats, stats_table

PROG = "python -m batchlab.quiz"


def _fail(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


def _report_bad(errors: Sequence[tuple[str, str]]) -> None:
    for f, msg in errors:
        print(f"{display_name(f)}: {msg}", file=sys.stderr)


def _cmd_grade(args: argparse.Namespace) -> int:
    reports, errors = grade_files(args.files, args.bank)
    for r in reports:
        print(json.dumps(r, ensure_ascii=False))
    _report_bad(errors)
    if args.csv:
        write_csv(args.csv, reports, errors, order=[str(f) for f in args.files])
    return 2 if errors else 0


def _cmd_stats(args: argparse.Namespace) -> int:
    reports, errors = grade_files(args.files, args.bank)
    _report_bad(errors)
    names = {r["bank"] for r in reports}
    if len(names) > 1:
        return _fail(f"the files answer different banks ({', '.join(sorted(names))}): give --bank")
    if not reports:
        return _fail("no valid submission to compute statistics from")
    bank = load_bank(args.bank or names.pop())
    rows = item_stats(reports, bank)
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    else:
        sys.stdout.write(stats_table(rows, bank, len(reports)))
    return 2 if errors else 0


def _cmd_export(args: argparse.Namespace) -> int:
    bank = load_bank(args.bank)
    data = moodle_xml(bank).encode("utf-8") if args.format == "moodle" else qti_package(bank)
    if args.output:
        Path(args.output).write_bytes(data)
        print(f"wrote {args.output}: {len(bank)} questions ({args.format})", file=sys.stderr)
        return 0
    if args.format == "qti" and sys.stdout.isatty():
        return _fail("a QTI package is a zip file: give -o ch02-qti.zip (or redirect stdout)")
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    sys.stdout.write(render_text(args.bank, seed=args.seed, learner=args.learner, answers=args.answers,
                                 article_order=args.article_order))
    return 0


def _cmd_learner(args: argparse.Namespace) -> int:
    if args.forget:
        print("已删除记住的学员 id" if forget_learner() else "没有记住的学员 id")
        return 0
    if args.id is not None:
        path = remember_learner(args.id)
        print(f"学员 id 已记住：{args.id.strip()}（{path}）")
        return 0
    who = current_learner()
    print(f"学员 id：{who}" if who else f"还没有设置学员 id（{learner_file()}）")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    banks = {b.name: b for b in map(load_bank, args.files)} if args.files else load_all()
    if not banks:
        return _fail(f"no banks in {quiz_dir()}")
    for b in banks.values():
        kinds = {k: sum(q.kind == k for q in b) for k in ("single", "multi", "numeric")}
        seeded = sum(q.seeded for q in b)
        print(f"ok {b.name}: {len(b)} questions ({kinds['single']} single, {kinds['multi']} multi, "
              f"{kinds['numeric']} numeric of which {seeded} seeded)")
    problems = audit(banks)
    shares = key_positions(banks)
    if shares:
        print("keys: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
        row = blind_scores(banks).get("all", {})
        print("blind: " + ", ".join(f"{s} {row[s]:.0%} (chance {row[s + ':chance']:.0%})"
                                    for s in ("always-first", "always-longest", "all-of-the-above")
                                    if s in row))
    for p in problems:
        print(f"{PROG}: audit: {p}", file=sys.stderr)
    return 2 if problems else 0


def _cmd_sync(args: argparse.Namespace) -> int:
    files = args.files or [quiz_dir() / f"{n}.json" for n in list_banks()]
    for f in files:
        print(f"synced {f}: {sync_file(f)} questions")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    p = CliParser(prog=PROG, description="batchlab quizzes: grade, analyse, export, show or check banks")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=CliParser)
    g = sub.add_parser("grade", help="grade submission JSON files")
    g.add_argument("files", nargs="+", metavar="FILE")
    g.add_argument("--bank", help="bank to grade against (default: each file's _bank, else interview)")
    g.add_argument("--csv", metavar="OUT", help="also write one CSV row per file")
    st = sub.add_parser("stats", help="item statistics over a class's submissions")
    st.add_argument("files", nargs="+", metavar="FILE")
    st.add_argument("--bank", help="bank (default: the files' _bank)")
    st.add_argument("--json", action="store_true", help="one JSON object per question")
    e = sub.add_parser("export", help="export a bank as Moodle XML or a QTI 2.1 package")
    e.add_argument("--bank", required=True)
    e.add_argument("--format", required=True, choices=("moodle", "qti"))
    e.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    s = sub.add_parser("show", help="print a bank's questions for self-study")
    s.add_argument("--bank", default="interview")
    s.add_argument("--answers", action="store_true", help="also print keys and explanations")
    s.add_argument("--article-order", action="store_true",
                   help="options in the bank file's order, not the learner's")
    who = s.add_mutually_exclusive_group()
    who.add_argument("--learner", help="learner id: seeds the numbers and the option order")
    who.add_argument("--seed", type=int, help="seed for the numbers and the option order")
    le = sub.add_parser("learner", help="show or remember the learner id the notebooks share")
    le.add_argument("id", nargs="?", help="the id to remember")
    le.add_argument("--forget", action="store_true", help="forget the remembered id")
    c = sub.add_parser("check", help="validate and audit banks (default: all in quiz/)")
    c.add_argument("files", nargs="*", metavar="BANK_FILE", type=Path)
    y = sub.add_parser("sync", help="validate banks and rewrite them in canonical form (authors)")
    y.add_argument("files", nargs="*", metavar="BANK_FILE", type=Path)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    if getattr(args, "seed", None) is not None and args.seed < 0:
        return _fail("--seed must be a non-negative integer")
    try:
        return {"grade": _cmd_grade, "stats": _cmd_stats, "export": _cmd_export, "show": _cmd_show,
                "learner": _cmd_learner, "check": _cmd_check, "sync": _cmd_sync}[args.cmd](args)
    except BrokenPipeError:  # e.g. `... show | head`
        return 0
    except OSError as e:  # writing --csv / -o / the learner file
        return _fail(f"cannot write {e.filename}: {e.strerror or e}")
    except ValueError as e:  # a bad bank, learner id or bank file: one line, nothing done
        return _fail(str(e))


if __name__ == "__main__":
    sys.exit(main())
