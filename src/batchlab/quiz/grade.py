"""Grading submissions against a bank (format and meta keys: quiz/README.md, "Submissions and
grading"); a malformed submission raises `SubmissionError` with a one-line message.
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

_META_KEYS = ("_bank", "_learner", "_shown", "_order", "_seed")


class SubmissionError(ValueError):
    """A submission that cannot be graded (bad JSON, unknown id, malformed answer, …)."""


def _short(value: Any, limit: int = 32) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _choices_text(q: Question, letters_ok: bool) -> str:
    letters = list(q.options)
    return (f"{letters[0]}–{letters[-1]} or " if letters_ok else "") + f"ids {', '.join(q.option_ids)}"


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
    """The answer in canonical form: an option id, a list of ids in file order, a float, or None
    (unanswered). `letters_ok` (default: not shuffled): whether article letters are accepted."""
    if letters_ok is None:
        letters_ok = not q.shuffled
    if given is None:
        return None
    if q.kind == "single":
        if not isinstance(given, str):
            why = (", not a list" if isinstance(given, list)
                   else f" ({_choices_text(q, letters_ok)}), got {_short(given)}")
            raise SubmissionError(f"{q.id}: a single-choice answer must be one option{why}")
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


def _answer_text(q: Question, value: Any) -> Any:
    """A canonical answer as reported: article letters for unshuffled banks, else ids or numbers."""
    if value is None or q.kind == "numeric" or q.shuffled:
        return value
    return q.letter_of(value) if q.kind == "single" else sorted(map(q.letter_of, value))


def check_answer(q: Question, given: Any, seed: int | None = None,
                 letters_ok: bool | None = None) -> tuple[bool, Any, Any]:
    """Grade one answer: (correct, expected, given) as reported; multi-choice all-or-nothing,
    numbers within the tolerance of the value for `seed`."""
    norm = normalize_answer(q, given, letters_ok)
    expected = q.expected_ids(seed)
    if q.kind == "numeric":
        return norm is not None and q.is_close(norm, expected), float(f"{expected:.10g}"), norm
    ok = norm is not None and norm == expected
    return ok, _answer_text(q, expected), _answer_text(q, norm)


def _learner_of(sub: Mapping[str, Any]) -> str | None:
    try:
        return None if sub.get("_learner") is None else check_learner(sub["_learner"])
    except ValueError as e:
        raise SubmissionError(f"_learner: {e}") from None


def _submission_seed(sub: Mapping[str, Any], learner: str | None) -> int | None:
    """The seed of a submission's numbers: from `_learner` alone (None: default numbers)."""
    seed = seed_for(learner) if learner else None
    if (s := sub.get("_seed")) is not None:
        if learner is None:
            raise SubmissionError("_seed is not accepted: the numbers derive from _learner alone")
        if s != seed or isinstance(s, bool):
            raise SubmissionError("_seed does not match the learner id: the numbers derive from "
                                  "_learner alone (drop _seed)")
    return seed


def _shown_questions(sub: Mapping[str, Any], b: Bank, learner: str | None) -> list[str]:
    """The ids graded: `_shown` (checked: this bank's ids, no repeats, a learner's own draw), else all."""
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
    return [qid for qid in b.ids if qid in shown]


class _BankCache:
    def __init__(self, bank: Bank | str | None) -> None:
        self.fixed, self.cache = bank, {}

    def get(self, name: str) -> Bank:
        return self.cache[name] if name in self.cache else self.cache.setdefault(name, load_bank(name))

    def resolve(self, sub: Mapping[str, Any]) -> Bank:
        declared = sub.get("_bank")
        if declared is not None and not isinstance(declared, str):
            raise SubmissionError("_bank must be a bank name such as \"interview\"")
        if declared is not None and len(declared) > 40:
            raise SubmissionError(f"_bank: unknown bank {_short(declared)}")
        if self.fixed is None:
            try:
                return self.get(declared or "interview")
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
    """Grade one submission (a dict) against `bank`, else its `_bank`, else `interview`:
    `{"file", "bank", "learner"?, "score", "total" = "shown" (questions graded), "bank_total",
    "results": {id: {"correct", "expected", "given"}}}`."""
    if not isinstance(sub, Mapping):
        raise SubmissionError("a submission must be a JSON object mapping question ids to answers")
    banks = _banks or _BankCache(bank)
    b = banks.resolve(sub)
    for key in sub:
        if key.startswith("_"):
            if key not in _META_KEYS:
                raise SubmissionError(
                    f"unknown key {_short(key)} (allowed extra keys: {', '.join(_META_KEYS)})")
        elif key not in b:
            raise SubmissionError(
                f"unknown question id {_short(key)} (bank {b.name} has {b.ids[0]}…{b.ids[-1]})")
    order = sub.get("_order")
    if order not in (None, "article"):
        raise SubmissionError("_order must be \"article\" (letters then mean the bank file's order)")
    learner = _learner_of(sub)
    seed = _submission_seed(sub, learner)
    ids = _shown_questions(sub, b, learner)
    extra = [k for k in sub if not k.startswith("_") and k not in ids]
    if extra:
        raise SubmissionError(f"answers question {extra[0]!r}, which _shown does not list")
    results = {qid: dict(zip(("correct", "expected", "given"),
                             check_answer(b[qid], sub.get(qid), seed, True if order else None)))
               for qid in ids}
    return {"file": file, "bank": b.name, **({"learner": learner} if learner else {}),
            "score": sum(r["correct"] for r in results.values()), "total": len(ids), "shown": len(ids),
            "bank_total": len(b), "results": results}


def grade_file(path: str | Path, bank: Bank | str | None = None) -> dict[str, Any]:
    """Grade one submission file. Raises `SubmissionError` whose message starts with the file."""
    return grade_files([path], bank, _raise=True)[0][0]


def grade_files(
    paths: Iterable[str | Path], bank: Bank | str | None = None, *, _raise: bool = False,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Grade several files: (reports of the valid ones, `(file, message)` per bad one); a bad
    file does not stop the others, a bad `bank` raises `ValueError`."""
    banks = _BankCache(bank)
    if isinstance(bank, str):
        banks.get(bank)  # fail early, once, on a bad --bank
    reports, errors = [], []
    for path in paths:
        name = str(path)
        try:
            reports.append(grade_submission(read_json_file(path), file=name, _banks=banks))
        except ValueError as e:  # a SubmissionError, or read_json_file's one-line problem
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
    """One CSV row per file (in `order`): file, bank, learner, score, total, shown, bank_total,
    1/0 per question (empty if not shown), error (a bad file's only other cell is `file`)."""
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
    out = Path(out)
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, ["file", "bank", "learner", "score", "total", "shown", "bank_total",
                                *qids, "error"], restval="")
        w.writeheader()
        w.writerows(rows[f] for f in (rows if order is None else order) if f in rows)
    return out

