"""`python -m batchlab.quiz` in a subprocess: exit codes, one-line messages, CSV, show, check."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.quiz import load_bank

KEY = {q.id: q.raw["answer"] for q in load_bank("interview")}


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchlab.quiz", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


@pytest.fixture
def subs(tmp_path: Path) -> Path:
    (tmp_path / "a_good.json").write_text(json.dumps(KEY), "utf-8")
    (tmp_path / "b_partial.json").write_text(json.dumps({"Q1": "B", "Q6": ["A", "B"]}), "utf-8")
    (tmp_path / "c_bad.json").write_text("not json", "utf-8")
    (tmp_path / "d_unknown.json").write_text('{"Q99": "A"}', "utf-8")
    (tmp_path / "e_list.json").write_text('{"Q2": ["B"]}', "utf-8")
    return tmp_path


def test_grade_mixed_files(subs: Path) -> None:
    files = sorted(str(p) for p in subs.glob("*.json"))
    r = run("grade", *files, "--bank", "interview", "--csv", str(subs / "class.csv"))
    assert r.returncode == 2
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert [Path(o["file"]).name for o in out] == ["a_good.json", "b_partial.json"]
    assert [(o["score"], o["total"]) for o in out] == [(10, 10), (1, 10)]
    assert out[1]["results"]["Q6"] == {"correct": False, "expected": ["A", "B", "D"],
                                       "given": ["A", "B"]}
    err = r.stderr.splitlines()
    assert len(err) == 3 and "Traceback" not in r.stderr
    assert err[0].startswith(str(subs / "c_bad.json") + ": not valid JSON")
    assert err[1].startswith(str(subs / "d_unknown.json") + ": unknown question id 'Q99'")
    assert err[2].startswith(str(subs / "e_list.json") + ": Q2: a single-choice answer")
    rows = list(csv.DictReader((subs / "class.csv").open(encoding="utf-8")))
    assert [Path(row["file"]).name for row in rows] == [Path(f).name for f in files]
    assert [row["score"] for row in rows] == ["10", "1", "", "", ""]


def test_grade_all_valid_exits_0_and_default_bank_is_interview(subs: Path) -> None:
    r = run("grade", str(subs / "a_good.json"), str(subs / "b_partial.json"))
    assert r.returncode == 0 and r.stderr == ""
    assert [json.loads(line)["bank"] for line in r.stdout.splitlines()] == ["interview"] * 2


def test_grade_seeded_submission_from_the_widget_format(tmp_path: Path) -> None:
    q = load_bank("ch05")["ch05-1"]
    from batchlab.quiz import seed_for
    sub = {"_bank": "ch05", "_learner": "li4", "ch05-1": q.expected(seed_for("li4"))}
    p = tmp_path / "li4.json"
    p.write_text(json.dumps(sub), "utf-8")
    r = run("grade", str(p))
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["bank"] == "ch05" and out["results"]["ch05-1"]["correct"] is True


@pytest.mark.parametrize("args, text", [
    (("grade",), "required: FILE"),
    (("grade", "x.json", "--bank", "nope"), "unknown bank 'nope'"),
    (("frobnicate",), "invalid choice"),
    (("show", "--bank", "ch99"), "unknown bank 'ch99' (available: interview, ch00"),
    (("show", "--seed", "-1"), "--seed must be a non-negative integer"),
    (("grade", "missing.json", "--csv", "/nonexistent-dir/x.csv"), "cannot write"),
])
def test_bad_usage_is_one_line_exit_2(args, text, tmp_path: Path) -> None:
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("python -m batchlab.quiz")]
    assert len(lines) == 1 and text in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_show_prints_questions_without_answers() -> None:
    r = run("show", "--bank", "interview")
    assert r.returncode == 0
    for q in load_bank("interview"):
        assert q.raw["question"] in r.stdout
    assert "答案：" not in r.stdout and "解析" not in r.stdout
    r = run("show", "--bank", "interview", "--answers")
    assert "答案：A、B、D" in r.stdout and "勘误：" in r.stdout


def test_show_seeded_bank_for_a_learner() -> None:
    a = run("show", "--bank", "ch05", "--learner", "zhang3").stdout
    b = run("show", "--bank", "ch05", "--learner", "zhang3").stdout
    c = run("show", "--bank", "ch05").stdout
    assert a == b and a != c and "seed =" in a


def test_check_banks(tmp_path: Path) -> None:
    r = run("check")
    assert r.returncode == 0 and r.stdout.count("ok ") == 13
    bad = tmp_path / "ch03.json"
    bad.write_text('[{"id": "ch03-1", "kind": "single"}]', "utf-8")
    r = run("check", str(bad))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "ch03.json: ch03-1: 'question' is a required property" in r.stderr


@pytest.mark.slow
def test_show_shuffles_chapter_options_per_learner_and_keeps_article_order_on_request() -> None:
    def options(out: str, qid: str) -> list[str]:
        block = out.split(f"\n\n{qid} ")[1].split("\n\n")[0]
        return [line.strip()[3:] for line in block.splitlines()[1:] if line.startswith("  ")]

    art = run("show", "--bank", "ch06", "--article-order").stdout
    q = load_bank("ch06")["ch06-5"]
    assert options(art, "ch06-5") == list(q.options.values())
    mine = {tuple(options(run("show", "--bank", "ch06", "--learner", f"l{i}").stdout, "ch06-5"))
            for i in range(4)}
    assert len(mine) > 1 and all(sorted(m) == sorted(q.options.values()) for m in mine)
    iv = run("show", "--bank", "interview", "--learner", "l1").stdout
    assert options(iv, "Q1") == list(load_bank("interview")["Q1"].options.values())
    a = run("show", "--bank", "ch06", "--learner", "l1", "--answers").stdout
    block = a.split("\n\nch06-5 ")[1].split("\n\n")[0]
    letter = next(line.strip()[0] for line in block.splitlines()
                  if line.startswith("  ") and line.strip()[3:] == q.option("reject")["answer"])
    assert f"答案：{letter}" in block


def test_check_reports_keys_and_blind_strategies() -> None:
    r = run("check")
    assert r.returncode == 0 and "keys: A " in r.stdout and "always-first" in r.stdout
