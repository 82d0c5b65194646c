"""Grading submissions against a bank.

A submission is a JSON object mapping question ids to answers: a letter (`"B"`) for a
single-choice question, a list of letters (`["A", "B"]`) for a multi-choice one, a number for a
numeric one. Optional keys: `_bank` (the bank it answers), `_learner` (learner id; also the
seed source for seeded questions) and `_seed` (an explicit seed; wins over `_learner`).
Multi-choice is all-or-nothing; a missing answer (or `null`) counts as wrong. A malformed
submission raises `SubmissionError` with a one-line message.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from batchlab.quiz.bank import Bank, Question, load_bank, read_json
from batchlab.quiz.params import seed_for

__all__ = [
    "META_KEYS",
    "SubmissionError",
    "check_answer",
    "grade_file",
    "grade_files",
    "grade_submission",
    "load_submission",
    "normalize_answer",
    "submission_seed",
    "write_csv",
]

META_KEYS = ("_bank", "_learner", "_seed")
"""Keys a submission may carry besides question ids."""

DEFAULT_BANK = "interview"


class SubmissionError(ValueError):
    """A submission that cannot be graded (bad JSON, unknown id, malformed answer, …)."""


def _letters_text(q: Question) -> str:
    letters = list(q.options)
    return f"{letters[0]}–{letters[-1]}"


def normalize_answer(q: Question, given: Any) -> Any:
    """The learner's answer in canonical form (uppercase letter, sorted letters, float).

    `None` stays `None` (unanswered). Raises `SubmissionError` naming the question and problem.
    """
    if given is None:
        return None
    if q.kind == "single":
        if isinstance(given, list):
            raise SubmissionError(f"{q.id}: a single-choice answer must be one letter, not a list")
        if not isinstance(given, str):
            raise SubmissionError(f"{q.id}: a single-choice answer must be a letter like \"B\"")
        letter = given.strip().upper()
        if letter not in q.options:
            raise SubmissionError(
                f"{q.id}: {given!r} is not among the options {_letters_text(q)}")
        return letter
    if q.kind == "multi":
        if not isinstance(given, list):
            raise SubmissionError(
                f"{q.id}: a multi-choice answer must be a list of letters like [\"A\", \"B\"]")
        out = []
        for g in given:
            if not isinstance(g, str) or g.strip().upper() not in q.options:
                raise SubmissionError(
                    f"{q.id}: {g!r} is not among the options {_letters_text(q)}")
            out.append(g.strip().upper())
        if len(set(out)) != len(out):
            raise SubmissionError(f"{q.id}: a letter is repeated in {given!r}")
        return sorted(out)
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise SubmissionError(f"{q.id}: a numeric answer must be a number, got {given!r}")
    if not math.isfinite(given):
        raise SubmissionError(f"{q.id}: a numeric answer must be finite, got {given!r}")
    return float(given)


def check_answer(q: Question, given: Any, seed: int | None = None) -> tuple[bool, Any, Any]:
    """Grade one answer: returns (correct, expected, given in canonical form).

    Multi-choice is all-or-nothing; numeric answers must lie within the question's tolerance of
    the value for `seed` (seeded questions) or of the stored answer.
    """
    norm = normalize_answer(q, given)
    expected = q.expected(seed)
    shown = float(f"{expected:.10g}") if q.kind == "numeric" else expected
    if norm is None:
        return False, shown, None
    if q.kind == "numeric":
        return q.is_close(norm, expected), shown, norm
    return norm == expected, shown, norm


def submission_seed(sub: Mapping[str, Any]) -> int | None:
    """The seed a submission's seeded questions were drawn with: `_seed`, else from `_learner`."""
    if "_seed" in sub and sub["_seed"] is not None:
        s = sub["_seed"]
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise SubmissionError(f"_seed must be a non-negative integer, got {s!r}")
        return s
    learner = sub.get("_learner")
    if learner is None:
        return None
    if not isinstance(learner, str) or not learner.strip():
        raise SubmissionError("_learner must be a non-empty string")
    return seed_for(learner)


class _BankCache:
    def __init__(self, bank: Bank | str | None) -> None:
        self.fixed = bank
        self.cache: dict[str, Bank] = {}

    def get(self, name: str) -> Bank:
        if name not in self.cache:
            self.cache[name] = load_bank(name)
        return self.cache[name]

    def resolve(self, sub: Mapping[str, Any]) -> Bank:
        declared = sub.get("_bank")
        if declared is not None and not isinstance(declared, str):
            raise SubmissionError("_bank must be a bank name such as \"interview\"")
        if self.fixed is None:
            try:
                return self.get(declared or DEFAULT_BANK)
            except ValueError as e:
                raise SubmissionError(f"_bank: {e}") from None
        bank = self.fixed if isinstance(self.fixed, Bank) else self.get(self.fixed)
        if declared is not None and declared != bank.name:
            raise SubmissionError(
                f"answers are for bank {declared!r} but are graded against {bank.name!r}")
        return bank


def grade_submission(
    sub: Any, bank: Bank | str | None = None, *, file: str = "<submission>",
    _banks: _BankCache | None = None,
) -> dict[str, Any]:
    """Grade one submission (a dict). `bank` defaults to the submission's `_bank`, else
    `interview`. Returns `{"file", "bank", ["learner",] "score", "total", "results"}` where
    results maps each question id to `{"correct", "expected", "given"}`."""
    if not isinstance(sub, Mapping):
        raise SubmissionError("a submission must be a JSON object mapping question ids to answers")
    banks = _banks or _BankCache(bank)
    b = banks.resolve(sub)
    for key in sub:
        if not isinstance(key, str):
            raise SubmissionError(f"key {key!r} is not a question id")
        if key.startswith("_"):
            if key not in META_KEYS:
                raise SubmissionError(
                    f"unknown key {key!r} (allowed extra keys: {', '.join(META_KEYS)})")
        elif key not in b:
            raise SubmissionError(
                f"unknown question id {key!r} (bank {b.name} has {b.ids[0]}…{b.ids[-1]})")
    seed = submission_seed(sub)
    results = {}
    score = 0
    for q in b:
        ok, expected, given = check_answer(q, sub.get(q.id), seed)
        results[q.id] = {"correct": ok, "expected": expected, "given": given}
        score += ok
    report: dict[str, Any] = {"file": file, "bank": b.name}
    if isinstance(sub.get("_learner"), str):
        report["learner"] = sub["_learner"]
    report.update(score=score, total=len(b), results=results)
    return report


def load_submission(path: str | Path) -> Any:
    """Read a submission file; `SubmissionError` if unreadable or not JSON."""
    try:
        return read_json(path)
    except ValueError as e:
        raise SubmissionError(str(e)) from None


def grade_file(path: str | Path, bank: Bank | str | None = None) -> dict[str, Any]:
    """Grade one submission file. Raises `SubmissionError` whose message starts with the file."""
    return grade_files([path], bank, _raise=True)[0][0]


def grade_files(
    paths: Iterable[str | Path], bank: Bank | str | None = None, *, _raise: bool = False,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Grade several files; a bad file does not stop the others.

    Returns (reports, errors): one report per valid file, and `(file, message)` per bad one,
    in input order. A bad bank name raises `ValueError` (nothing could be graded).
    """
    banks = _BankCache(bank)
    if isinstance(bank, str):
        banks.get(bank)  # fail early, once, on a bad --bank
    reports, errors = [], []
    for path in paths:
        name = str(path)
        try:
            reports.append(grade_submission(load_submission(path), file=name, _banks=banks))
        except SubmissionError as e:
            if _raise:
                raise SubmissionError(f"{name}: {e}") from None
            errors.append((name, str(e)))
    return reports, errors


def write_csv(
    out: str | Path, reports: Sequence[dict[str, Any]], errors: Sequence[tuple[str, str]] = (),
    order: Sequence[str] | None = None,
) -> Path:
    """Write one row per file: file, bank, learner, score, total, one 1/0 column per question,
    error. Bad files get a row with only `file` and `error`. `order` lists files in row order."""
    qids: list[str] = []
    for r in reports:
        for qid in r["results"]:
            if qid not in qids:
                qids.append(qid)
    rows: dict[str, dict[str, Any]] = {}
    for r in reports:
        row = {"file": r["file"], "bank": r["bank"], "learner": r.get("learner", ""),
               "score": r["score"], "total": r["total"], "error": ""}
        row.update({qid: int(v["correct"]) for qid, v in r["results"].items()})
        rows[r["file"]] = row
    for f, msg in errors:
        rows[f] = {"file": f, "error": msg}
    names = list(order) if order is not None else list(rows)
    out = Path(out)
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["file", "bank", "learner", "score", "total", *qids, "error"],
                           restval="")
        w.writeheader()
        for f in names:
            if f in rows:
                w.writerow(rows[f])
    return out
