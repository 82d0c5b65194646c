"""Issue 19 item 5: chapter self-checks carry the learner id the quiz notebook remembered, and
grading counts only the questions a learner was shown."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.quiz import (
    check_learner,
    current_learner,
    display_chapter_quiz,
    forget_learner,
    grade_submission,
    load_bank,
    remember_learner,
    seed_for,
)
from batchlab.quiz.learner import LEARNER_ENV, learner_file
from batchlab.quiz.widget import Quiz


@pytest.fixture(autouse=True)
def own_config(monkeypatch, tmp_path: Path) -> Path:
    monkeypatch.delenv(LEARNER_ENV, raising=False)
    monkeypatch.setenv("BATCHLAB_CONFIG_DIR", str(tmp_path / "cfg"))
    return tmp_path / "cfg"


@pytest.mark.parametrize("good", ["zhang3", " 张三 ", "li.si@school", "s-01", "王 小明", "背原文的同学"])
def test_valid_learner_ids(good: str) -> None:
    assert check_learner(good) == good.strip()


@pytest.mark.parametrize("bad, problem", [
    ("", "must not be empty"), ("x" * 65, "at most 64"), ("-rm", "must start with a letter"),
    ("a  b", "single spaces"), ("a\tb", "may only use"), ("=SUM(A1)", "may only use"), (3, "a string"),
])
def test_invalid_learner_ids(bad, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_learner(bad)


def test_remembered_id_is_private_and_the_environment_wins(own_config: Path, monkeypatch) -> None:
    assert current_learner() is None
    path = remember_learner(" zhang3 ")
    assert path == learner_file() == own_config / "learner.json"
    assert json.loads(path.read_text("utf-8")) == {"learner": "zhang3"}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert current_learner() == "zhang3"
    monkeypatch.setenv(LEARNER_ENV, "li4")
    assert current_learner() == "li4"
    monkeypatch.setenv(LEARNER_ENV, "=bad id")
    assert current_learner() is None                  # an invalid id counts as none
    monkeypatch.delenv(LEARNER_ENV)
    path.write_text("{not json", "utf-8")
    assert current_learner() is None
    assert forget_learner() and current_learner() is None and not forget_learner()
    with pytest.raises(ValueError):
        remember_learner("a\nb")


def test_chapter_self_check_carries_the_remembered_learner(tmp_path: Path) -> None:
    anon = display_chapter_quiz("02", n=5, seed=2)
    assert "未设学员 id" in anon.splitlines()[0] and "学员 wang5" not in anon
    remember_learner("wang5")
    text = display_chapter_quiz("02", n=5, seed=2)    # the chapter's seed is then ignored
    assert "学员 wang5" in text.splitlines()[0]
    want = load_bank("ch02").pick(5, seed_for("wang5"))
    assert [line.split()[0] for line in text.splitlines() if line.startswith("ch02-")] == want


def test_chapter_export_grades_only_what_was_shown(tmp_path: Path) -> None:
    remember_learner("zhao6")
    quiz = Quiz("ch02", learner=current_learner(), n=5, export_path=tmp_path / "a.json")
    shown = list(quiz.views)
    for qid in shown[:2]:                             # 2 right of the 5 shown, 3 not answered
        quiz.answer(qid, quiz.session.instances[qid].expected)
    sub = json.loads(quiz.export().read_text("utf-8"))
    assert sub["_learner"] == "zhao6" and sub["_shown"] == shown
    r = grade_submission(sub)
    assert (r["score"], r["total"], r["shown"], r["bank_total"]) == (2, 5, 5, 7)   # not 2/7
    assert set(r["results"]) == set(shown)


@pytest.mark.slow
def test_learner_command(own_config: Path) -> None:
    env = {**os.environ, "BATCHLAB_CONFIG_DIR": str(own_config)}
    env.pop(LEARNER_ENV, None)
    run = lambda *a: subprocess.run([sys.executable, "-m", "batchlab.quiz", "learner", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=60, env=env)
    assert "还没有设置学员 id" in run().stdout
    r = run("zhang3")
    assert r.returncode == 0 and "zhang3" in r.stdout and current_learner() == "zhang3"
    assert "学员 id：zhang3" in run().stdout
    r = run("=bad")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "已删除" in run("--forget").stdout and current_learner() is None
