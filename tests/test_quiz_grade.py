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
    ({"Q1": "E"}, "Q1: 'E' is not among the options (A–D or ids split, merge"),
    ({"Q1": ["B"]}, "Q1: a single-choice answer must be one option, not a list"),
    ({"Q1": 2}, "Q1: a single-choice answer must be one option"),
    ({"Q3": "A"}, "Q3: a multi-choice answer must be a list of options"),
    ({"Q3": ["A", "Z"]}, "Q3: 'Z' is not among the options"),
    ({"Q3": ["A", "A"]}, "Q3: an option is repeated"),
    ({"Q3": ["A", "longer-wait"]}, "Q3: an option is repeated"),
    ({"_name": "x"}, "unknown key '_name'"),
    ({"_seed": -3}, "_seed is not accepted"),
    ({"_learner": ""}, "_learner: a learner id must not be empty"),
    ({"_learner": "x" * 65}, "at most 64 characters"),
    ({"_learner": "=cmd|calc"}, "may only use letters"),
    ({"_learner": "a\nb"}, "may only use letters"),
    ({"_shown": ["Q1", "Q1"]}, "_shown repeats"),
    ({"_shown": ["Q99"]}, "_shown: unknown question id"),
    ({"_shown": ["Q1"], "Q2": "B"}, "answers question 'Q2', which _shown does not list"),
    ({"_order": "shuffled"}, "_order must be"),
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
    r = grade_submission({"_bank": "ch05", "ch05-4": "right"})
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


def test_seed_derives_from_the_learner_id_alone() -> None:
    default = AMDAHL.expected(None)
    assert default == pytest.approx(1 / 0.2125)       # no learner: the bank's default numbers
    assert grade_submission({"ch05-1": default}, "ch05")["results"]["ch05-1"]["correct"]
    own = seed_for("zhang3")
    # an old export that wrote the learner's own seed still grades …
    r = grade_submission({"_learner": "zhang3", "_seed": own, "ch05-1": AMDAHL.expected(own)}, "ch05")
    assert r["results"]["ch05-1"]["correct"] and r["learner"] == "zhang3"
    # … but a _seed that borrows other numbers is refused, with or without a learner
    other = next(n for n in (f"s{i}" for i in range(100))
                 if AMDAHL.expected(seed_for(n)) != pytest.approx(AMDAHL.expected(own), rel=0.02))
    theirs = {"ch05-1": AMDAHL.expected(seed_for(other)), "_seed": seed_for(other)}
    for sub in ({"_learner": "zhang3", **theirs}, theirs):
        with pytest.raises(SubmissionError, match="_seed"):
            grade_submission(sub, "ch05")
    # and a learner is graded on their own numbers, not the defaults
    r = grade_submission({"_learner": other, "ch05-1": default}, "ch05")
    assert not r["results"]["ch05-1"]["correct"]


# --- option ids and letters -------------------------------------------------------------------


def test_choice_answers_by_stable_id_for_every_bank() -> None:
    for name in ("interview", "ch02", "ch06"):
        b = load_bank(name)
        key = {q.id: q.expected_ids() for q in b if q.kind != "numeric"}
        r = grade_submission({"_bank": name, **key})
        assert r["score"] == len(key) and r["total"] == len(b)


def test_interview_letters_are_the_articles_and_chapter_letters_need_article_order() -> None:
    assert grade_submission({"Q1": "B"})["results"]["Q1"]["correct"]          # article letters
    assert grade_submission({"Q1": "merge"})["results"]["Q1"] == {
        "correct": True, "expected": "B", "given": "B"}                        # reported as letters
    q = load_bank("ch02")["ch02-4"]                                            # key: toplevel = D
    with pytest.raises(SubmissionError, match="ch02-4: 'D' is a letter, but this bank's options are shuffled"):
        grade_submission({"ch02-4": "D"}, "ch02")
    r = grade_submission({"_order": "article", "ch02-4": "D"}, "ch02")
    assert r["results"]["ch02-4"] == {"correct": True, "expected": "toplevel", "given": "toplevel"}
    assert q.letter_of("toplevel") == "D"


def test_shown_questions_only_are_graded_and_counted() -> None:
    b = load_bank("ch02")
    shown = b.pick(5, seed_for("li4"))
    right = {qid: b[qid].expected_ids(seed_for("li4")) for qid in shown[:2]}
    r = grade_submission({"_bank": "ch02", "_learner": "li4", "_shown": shown, **right})
    assert (r["score"], r["total"], r["shown"], r["bank_total"]) == (2, 5, 5, 7)
    assert list(r["results"]) == shown
    other = [qid for qid in b.ids if qid not in shown][:1] + shown[1:]
    with pytest.raises(SubmissionError, match="_shown does not match the 5 questions"):
        grade_submission({"_bank": "ch02", "_learner": "li4", "_shown": other})


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
    assert list(rows[0])[:7] == ["file", "bank", "learner", "score", "total", "shown", "bank_total"]
    assert list(rows[0])[7:17] == [f"Q{i}" for i in range(1, 11)]


def test_csv_says_how_many_were_shown(tmp_path: Path) -> None:
    b = load_bank("ch03")
    shown = b.pick(3, seed_for("wang5"))
    p = tmp_path / "wang5.json"
    p.write_text(json.dumps({"_bank": "ch03", "_learner": "wang5", "_shown": shown,
                             shown[0]: b[shown[0]].expected_ids(seed_for("wang5"))}), "utf-8")
    full = tmp_path / "zhao6.json"
    full.write_text(json.dumps({"_bank": "ch03", "_learner": "zhao6"}), "utf-8")
    reports, errors = grade_files([p, full])
    row, row2 = list(csv.DictReader(write_csv(tmp_path / "c.csv", reports, errors).open(encoding="utf-8")))
    assert (row["score"], row["total"], row["shown"], row["bank_total"]) == ("1", "3", "3", "7")
    hidden = [qid for qid in b.ids if qid not in shown]
    assert all(row[qid] == "" for qid in hidden) and row[shown[1]] == "0"
    assert (row2["total"], row2["shown"]) == ("7", "7")
