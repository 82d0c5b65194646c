"""Grading submissions against a bank.

A submission is a JSON object mapping question ids to answers. A choice answer names options by
their stable id (`"toplevel"`, `["ids", "keep-slot"]`): that is what the quiz widget exports,
whatever order the learner saw the options in. Letters are article letters (the order of the
bank file and of `show --article-order`): always accepted for the interview bank, and for a
chapter bank only when the submission says `"_order": "article"` (its options are shuffled per
learner, so a bare letter would be ambiguous). A numeric answer is a number.

Optional keys: `_bank` (the bank it answers), `_learner` (learner id: the grader reports it, and
seeded questions are drawn from it alone), `_shown` (the ids of the questions the learner was
shown; only those are graded and counted), `_order`. `_seed` is refused unless it is exactly the
seed the learner id gives (old exports wrote it; it can never select other numbers).

Multi-choice is all-or-nothing; a missing answer (or `null`) counts as wrong. A malformed
submission raises `SubmissionError` with a one-line message. Files are read with
`batchlab.quiz.safe_json.read_json_file`: regular files only, at most 1 MiB, no deep nesting,
no duplicate keys.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from batchlab.quiz.bank import Bank, Question, load_bank
from batchlab.quiz.learner import check_learner
from batchlab.quiz.params import seed_for
from batchlab.quiz.safe_json import display_name, read_json_file

__all__ = [
    "META_KEYS",
    "SubmissionError",
    "answer_text",
    "check_answer",
    "grade_file",
    "grade_files",
    "grade_submission",
    "load_submission",
    "normalize_answer",
    "shown_questions",
    "submission_seed",
    "write_csv",
]

META_KEYS = ("_bank", "_learner", "_shown", "_order", "_seed")
"""Keys a submission may carry besides question ids."""

DEFAULT_BANK = "interview"


class SubmissionError(ValueError):
    """A submission that cannot be graded (bad JSON, unknown id, malformed answer, …)."""


def _short(value: Any, limit: int = 32) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _choices_text(q: Question, letters_ok: bool) -> str:
    ids = ", ".join(q.option_ids)
    if letters_ok:
        letters = list(q.options)
        return f"{letters[0]}–{letters[-1]} or ids {ids}"
    return f"ids {ids}"


def _one_choice(q: Question, g: Any, letters_ok: bool) -> str:
    if not isinstance(g, str):
        raise SubmissionError(f"{q.id}: {_short(g)} is not an option (use {_choices_text(q, letters_ok)})")
    s = g.strip()
    if len(s) == 1 and s.upper() in q.options:
        if not letters_ok:
            raise SubmissionError(
                f"{q.id}: {_short(g)} is a letter, but this bank's options are shuffled per learner: "
                f"name the option id ({', '.join(q.option_ids)}) or add \"_order\": \"article\"")
        return q.id_of_letter(s.upper())
    if s.lower() in q.option_ids:
        return s.lower()
    raise SubmissionError(f"{q.id}: {_short(g)} is not among the options ({_choices_text(q, letters_ok)})")


def normalize_answer(q: Question, given: Any, letters_ok: bool | None = None) -> Any:
    """The learner's answer in canonical form: an option id, a list of ids in file order, or a
    float. `letters_ok` (default: not shuffled) says whether article letters are accepted.

    `None` stays `None` (unanswered). Raises `SubmissionError` naming the question and problem.
    """
    if letters_ok is None:
        letters_ok = not q.shuffled
    if given is None:
        return None
    if q.kind == "single":
        if isinstance(given, list):
            raise SubmissionError(f"{q.id}: a single-choice answer must be one option, not a list")
        if not isinstance(given, str):
            raise SubmissionError(f"{q.id}: a single-choice answer must be one option "
                                  f"({_choices_text(q, letters_ok)}), got {_short(given)}")
        return _one_choice(q, given, letters_ok)
    if q.kind == "multi":
        if not isinstance(given, list):
            raise SubmissionError(f"{q.id}: a multi-choice answer must be a list of options "
                                  f"like [\"{q.option_ids[0]}\"]")
        out = [_one_choice(q, g, letters_ok) for g in given]
        if len(set(out)) != len(out):
            raise SubmissionError(f"{q.id}: an option is repeated in {_short(given, 60)}")
        return [oid for oid in q.option_ids if oid in out]
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise SubmissionError(f"{q.id}: a numeric answer must be a number, got {_short(given)}")
    if not math.isfinite(given):
        raise SubmissionError(f"{q.id}: a numeric answer must be finite, got {given!r}")
    return float(given)


def answer_text(q: Question, value: Any) -> Any:
    """An answer in canonical form as the grader reports it: article letters for banks that are
    never shuffled (the interview bank), ids otherwise; numbers unchanged."""
    if value is None or q.kind == "numeric" or q.shuffled:
        return value
    if q.kind == "single":
        return q.letter_of(value)
    return sorted(q.letter_of(v) for v in value)


def check_answer(q: Question, given: Any, seed: int | None = None,
                 letters_ok: bool | None = None) -> tuple[bool, Any, Any]:
    """Grade one answer: returns (correct, expected, given), both as `answer_text` reports them.

    Multi-choice is all-or-nothing; numeric answers must lie within the question's tolerance of
    the value for `seed` (seeded questions) or of the stored answer.
    """
    norm = normalize_answer(q, given, letters_ok)
    expected = q.expected_ids(seed)
    if q.kind == "numeric":
        shown = float(f"{expected:.10g}")
        if norm is None:
            return False, shown, None
        return q.is_close(norm, expected), shown, norm
    ok = norm is not None and norm == expected
    return ok, answer_text(q, expected), answer_text(q, norm)


def _learner_of(sub: Mapping[str, Any]) -> str | None:
    learner = sub.get("_learner")
    if learner is None:
        return None
    try:
        return check_learner(learner)
    except ValueError as e:
        raise SubmissionError(f"_learner: {e}") from None


def submission_seed(sub: Mapping[str, Any]) -> int | None:
    """The seed a submission's seeded questions are drawn with: derived from `_learner` alone
    (None without a learner: the bank's default numbers). A `_seed` other than the learner's own
    is refused."""
    learner = _learner_of(sub)
    seed = seed_for(learner) if learner else None
    if "_seed" in sub and sub["_seed"] is not None:
        s = sub["_seed"]
        if learner is None:
            raise SubmissionError("_seed is not accepted: the numbers derive from _learner alone")
        if s != seed or isinstance(s, bool):
            raise SubmissionError("_seed does not match the learner id: the numbers derive from "
                                  "_learner alone (drop _seed)")
    return seed


def shown_questions(sub: Mapping[str, Any], b: Bank, learner: str | None) -> list[str]:
    """The ids graded for this submission: `_shown` if given (checked: ids of this bank, no
    repeats, and for a learner exactly the quiz's seeded draw of that many), else the whole bank."""
    shown = sub.get("_shown")
    if shown is None:
        return b.ids
    if not isinstance(shown, list) or not shown or not all(isinstance(x, str) for x in shown):
        raise SubmissionError("_shown must be a non-empty list of question ids")
    unknown = [x for x in shown if x not in b]
    if unknown:
        raise SubmissionError(f"_shown: unknown question id {_short(unknown[0])} in bank {b.name}")
    if len(set(shown)) != len(shown):
        raise SubmissionError("_shown repeats a question id")
    if learner is not None:
        want = b.pick(len(shown), seed_for(learner))
        if sorted(shown) != sorted(want):
            raise SubmissionError(
                f"_shown does not match the {len(shown)} questions this learner's quiz shows "
                f"({', '.join(want)})")
    keep = set(shown)
    return [qid for qid in b.ids if qid in keep]


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
        if declared is not None and len(declared) > 40:
            raise SubmissionError(f"_bank: unknown bank {_short(declared)}")
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
    `interview`. Returns `{"file", "bank", ["learner",] "score", "total", "shown",
    "bank_total", "results"}`: `total` = `shown` = the number of questions graded (those the
    learner was shown), `bank_total` the bank's size; results maps each graded id to
    `{"correct", "expected", "given"}`."""
    if not isinstance(sub, Mapping):
        raise SubmissionError("a submission must be a JSON object mapping question ids to answers")
    banks = _banks or _BankCache(bank)
    b = banks.resolve(sub)
    for key in sub:
        if key.startswith("_"):
            if key not in META_KEYS:
                raise SubmissionError(
                    f"unknown key {_short(key)} (allowed extra keys: {', '.join(META_KEYS)})")
        elif key not in b:
            raise SubmissionError(
                f"unknown question id {_short(key)} (bank {b.name} has {b.ids[0]}…{b.ids[-1]})")
    order = sub.get("_order")
    if order not in (None, "article"):
        raise SubmissionError("_order must be \"article\" (letters then mean the bank file's order)")
    learner = _learner_of(sub)
    seed = submission_seed(sub)
    ids = shown_questions(sub, b, learner)
    extra = [k for k in sub if not k.startswith("_") and k not in ids]
    if extra:
        raise SubmissionError(f"answers question {extra[0]!r}, which _shown does not list")
    results = {}
    score = 0
    for qid in ids:
        q = b[qid]
        letters_ok = True if order == "article" else None
        ok, expected, given = check_answer(q, sub.get(qid), seed, letters_ok)
        results[qid] = {"correct": ok, "expected": expected, "given": given}
        score += ok
    report: dict[str, Any] = {"file": file, "bank": b.name}
    if learner is not None:
        report["learner"] = learner
    report.update(score=score, total=len(ids), shown=len(ids), bank_total=len(b), results=results)
    return report


def load_submission(path: str | Path) -> Any:
    """Read a submission file defensively; `SubmissionError` with a one-line problem (not a
    regular file, too large, not JSON, nested too deeply, duplicate key, …)."""
    try:
        return read_json_file(path)
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
                raise SubmissionError(f"{display_name(name)}: {e}") from None
            errors.append((name, str(e)))
    return reports, errors


def _natural(qid: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", qid)]


def write_csv(
    out: str | Path, reports: Sequence[dict[str, Any]], errors: Sequence[tuple[str, str]] = (),
    order: Sequence[str] | None = None,
) -> Path:
    """Write one row per file: file, bank, learner, score, total, shown, bank_total, one column
    per question (1/0, empty when the learner was not shown it), error. Bad files get a row with
    only `file` and `error`. `order` lists files in row order."""
    qids = sorted({qid for r in reports for qid in r["results"]}, key=_natural)
    rows: dict[str, dict[str, Any]] = {}
    for r in reports:
        row = {"file": display_name(r["file"]), "bank": r["bank"], "learner": r.get("learner", ""),
               "score": r["score"], "total": r["total"], "shown": r["shown"],
               "bank_total": r["bank_total"], "error": ""}
        row.update({qid: int(v["correct"]) for qid, v in r["results"].items()})
        rows[r["file"]] = row
    for f, msg in errors:
        rows[f] = {"file": display_name(f), "error": msg}
    names = list(order) if order is not None else list(rows)
    out = Path(out)
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["file", "bank", "learner", "score", "total", "shown", "bank_total",
                                *qids, "error"], restval="")
        w.writeheader()
        for f in names:
            if f in rows:
                w.writerow(rows[f])
    return out

