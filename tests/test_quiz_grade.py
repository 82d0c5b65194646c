"""Grading submissions: correct, wrong, partial, missing, malformed, seeded, CSV."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from batchlab.quiz import (
    SubmissionError,
    grade_file,
    grade_files,
    grade_submission,
    load_bank,
    seed_for,
    write_csv,
)

INTERVIEW = load_bank("interview")
KEY = {q.id: q.raw["answer"] for q in INTERVIEW}


def _wrong(q) -> object:
    letters = list(q.options)
    if q.kind == "single":
        return next(x for x in letters if x != q.raw["answer"])
    return [x for x in letters if x not in q.raw["answer"]][:1] or letters[:1]


def test_all_correct_scores_full() -> None:
    r = grade_submission(dict(KEY))
    assert (r["score"], r["total"], r["bank"]) == (10, 10, "interview")
    assert all(v["correct"] for v in r["results"].values())
    assert r["results"]["Q3"] == {"correct": True, "expected": ["A", "B"], "given": ["A", "B"]}


def test_all_wrong_scores_zero() -> None:
    r = grade_submission({q.id: _wrong(q) for q in INTERVIEW})
    assert r["score"] == 0 and r["total"] == 10


def test_multi_is_all_or_nothing_and_order_free() -> None:
    res = lambda ans: grade_submission({"Q6": ans})["results"]["Q6"]["correct"]  # noqa: E731
    assert res(["A", "B", "D"]) and res(["D", "b", "A"])
    assert not res(["A", "B"])                    # partial: subset
    assert not res(["A", "B", "C", "D"])          # partial: superset
    assert not res([])                            # an empty list is an answer, and wrong


def test_missing_and_null_count_as_wrong() -> None:
    r = grade_submission({"Q1": "B", "Q2": None})
    assert r["score"] == 1
    assert r["results"]["Q2"] == {"correct": False, "expected": "B", "given": None}
    assert r["results"]["Q10"]["given"] is None


def test_letter_case_and_spaces_are_normalised() -> None:
    r = grade_submission({"Q1": " b "})
    assert r["results"]["Q1"] == {"correct": True, "expected": "B", "given": "B"}


@pytest.mark.parametrize("sub, problem", [
    (["B"], "must be a JSON object"),
    ({"Q11": "B"}, "unknown question id 'Q11'"),
    ({"Q1": "E"}, "Q1: 'E' is not among the options A–D"),
    ({"Q1": ["B"]}, "Q1: a single-choice answer must be one letter, not a list"),
    ({"Q1": 2}, "Q1: a single-choice answer must be a letter"),
    ({"Q3": "A"}, "Q3: a multi-choice answer must be a list of letters"),
    ({"Q3": ["A", "Z"]}, "Q3: 'Z' is not among the options"),
    ({"Q3": ["A", "A"]}, "Q3: a letter is repeated"),
    ({"_name": "x"}, "unknown key '_name'"),
    ({"_seed": -3}, "_seed must be a non-negative integer"),
    ({"_learner": ""}, "_learner must be a non-empty string"),
    ({"_bank": "ch02"}, "answers are for bank 'ch02' but are graded against 'interview'"),
])
def test_malformed_submission_raises_one_line(sub, problem) -> None:
    with pytest.raises(SubmissionError) as e:
        grade_submission(sub, "interview")
    assert problem in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("given, problem", [
    ("4.7", "a numeric answer must be a number"),
    (True, "a numeric answer must be a number"),
    ([4.7], "a numeric answer must be a number"),
    (math.nan, "must be finite"),
])
def test_wrong_type_for_numeric(given, problem) -> None:
    with pytest.raises(SubmissionError, match=problem):
        grade_submission({"ch05-1": given}, "ch05")


def test_bank_comes_from_submission_when_not_given() -> None:
    r = grade_submission({"_bank": "ch05", "ch05-4": "A"})
    assert r["bank"] == "ch05" and r["score"] == 1 and r["total"] == len(load_bank("ch05"))
    with pytest.raises(SubmissionError, match="_bank: unknown bank 'ch99'"):
        grade_submission({"_bank": "ch99"})


# --- seeded numeric questions -----------------------------------------------------------------

CH05 = load_bank("ch05")
AMDAHL = CH05["ch05-1"]


def test_seeded_question_is_graded_with_the_learners_numbers_and_tolerance() -> None:
    learner = "zhang3"
    inst = AMDAHL.instance(seed_for(learner))
    f, B = inst.params["f"], inst.params["B"]
    want = 1 / ((1 - f) + f / B)
    assert inst.expected == pytest.approx(want)
    assert f"f = {f}" in inst.stem and f"B = {B}" in inst.stem
    tol = 0.01 * want                                  # the bank states ±1 %
    ok = lambda x: grade_submission({"_learner": learner, "ch05-1": x}, "ch05")  # noqa: E731
    assert ok(want + 0.9 * tol)["results"]["ch05-1"]["correct"]
    assert ok(want - 0.9 * tol)["results"]["ch05-1"]["correct"]
    assert not ok(want + 1.1 * tol)["results"]["ch05-1"]["correct"]
    r = ok(round(want, 2))["results"]["ch05-1"]
    assert r["correct"] and r["expected"] == pytest.approx(want)


def test_seed_selection_rules() -> None:
    default = AMDAHL.expected(None)
    assert default == pytest.approx(1 / 0.2125)       # no seed: the bank's default numbers
    assert grade_submission({"ch05-1": default}, "ch05")["results"]["ch05-1"]["correct"]
    # _seed wins over _learner
    s = 12345
    r = grade_submission({"_learner": "zhang3", "_seed": s, "ch05-1": AMDAHL.expected(s)}, "ch05")
    assert r["results"]["ch05-1"]["correct"] and r["learner"] == "zhang3"
    # some learner gets numbers different from the default, and is graded on them
    other = next(n for n in (f"s{i}" for i in range(100))
                 if AMDAHL.expected(seed_for(n)) != pytest.approx(default, rel=0.02))
    r = grade_submission({"_learner": other, "ch05-1": default}, "ch05")
    assert not r["results"]["ch05-1"]["correct"]


def test_plain_numeric_tolerance() -> None:
    q = load_bank("ch02")["ch02-1"]           # 30/18, ±0.01
    assert q.raw["tolerance"] == {"abs": 0.01}
    res = lambda x: grade_submission({"ch02-1": x}, "ch02")["results"]["ch02-1"]["correct"]  # noqa: E731
    assert res(1.67) and res(1.66) and res(5 / 3) and not res(1.6) and not res(1.7)


# --- files and CSV --------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    def w(name: str, text: str) -> Path:
        p = tmp_path / name
        p.write_text(text, "utf-8")
        return p
    return {
        "good": w("good.json", json.dumps({"_learner": "zhang3", **KEY})),
        "partial": w("partial.json", json.dumps({"Q1": "B", "Q3": ["A"]})),
        "notjson": w("notjson.json", '{"Q1": "B",'),
        "unknown": w("unknown.json", '{"Q42": "A"}'),
        "letter": w("letter.json", '{"Q1": "F"}'),
        "list": w("list.json", '{"Q1": ["B"]}'),
    }


def test_grade_files_reports_bad_files_and_grades_the_rest(files) -> None:
    order = ["good", "notjson", "partial", "unknown", "letter", "list"]
    reports, errors = grade_files([files[k] for k in order], "interview")
    assert [Path(r["file"]).stem for r in reports] == ["good", "partial"]
    assert [r["score"] for r in reports] == [10, 1]
    assert [Path(f).stem for f, _ in errors] == ["notjson", "unknown", "letter", "list"]
    msgs = dict((Path(f).stem, m) for f, m in errors)
    assert "not valid JSON" in msgs["notjson"]
    assert "unknown question id 'Q42'" in msgs["unknown"]
    assert "'F' is not among the options" in msgs["letter"]
    assert "not a list" in msgs["list"]
    with pytest.raises(SubmissionError, match=r"notjson\.json: not valid JSON"):
        grade_file(files["notjson"])
    with pytest.raises(SubmissionError, match=r"nothere\.json: no such file"):
        grade_file(files["good"].parent / "nothere.json")
    assert grade_file(files["good"])["score"] == 10


def test_csv_has_one_row_per_file(files, tmp_path: Path) -> None:
    paths = [files["good"], files["notjson"], files["partial"]]
    reports, errors = grade_files(paths, "interview")
    out = write_csv(tmp_path / "class.csv", reports, errors, order=[str(p) for p in paths])
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [Path(r["file"]).name for r in rows] == ["good.json", "notjson.json", "partial.json"]
    good, bad, partial = rows
    assert (good["score"], good["total"], good["learner"], good["Q10"]) == ("10", "10", "zhang3", "1")
    assert (partial["score"], partial["Q1"], partial["Q3"], partial["Q2"]) == ("1", "1", "0", "0")
    assert bad["score"] == "" and "not valid JSON" in bad["error"]
    assert list(rows[0])[:5] == ["file", "bank", "learner", "score", "total"]
