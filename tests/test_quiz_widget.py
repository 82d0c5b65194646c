"""QuizSession logic without widgets, and the ipywidgets view built and driven headless."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchlab.quiz import (
    QuizSession,
    display_chapter_quiz,
    grade_submission,
    load_all,
    load_bank,
    render_text,
    seed_for,
    show_quiz,
)
from batchlab.quiz.widget import Quiz, headless

BANKS = load_all()


def _right(session: QuizSession, qid: str):
    return session.instances[qid].expected


# --- QuizSession ----------------------------------------------------------------------------


def test_session_feedback_and_score() -> None:
    s = QuizSession("interview")
    assert (s.score, len(s.results), len(s.questions)) == (0, 0, 10)
    fb = s.answer("Q5", "A")
    assert fb.correct and fb.text().startswith("Q5 正确。")
    assert "default_timeout_microseconds" in fb.explanation and "max_queue_delay" in fb.erratum
    fb = s.answer("Q3", ["A"])
    assert not fb.correct and fb.expected == ["A", "B"] and fb.given == ["A"]
    text = fb.text()
    assert "错误" in text and "正确答案：A、B" in text and "解析：" in text
    assert s.score_text() == "得分 1 / 10（已答 2 题）"
    s.answer("Q3", ["B", "A"])                       # a new answer replaces the old one
    assert (s.score, len(s.results)) == (2, 2)


def test_session_rejects_malformed_answers_and_records_nothing() -> None:
    s = QuizSession("interview")
    for qid, bad in [("Q1", "Z"), ("Q1", ["B"]), ("Q3", "A"), ("Q1", None)]:
        with pytest.raises(ValueError):
            s.answer(qid, bad)
    with pytest.raises(KeyError):
        s.answer("Q11", "A")
    assert not s.results and s.to_submission() == {"_bank": "interview"}


@pytest.mark.parametrize("name", list(BANKS))
def test_session_submission_is_what_the_grader_reads(name: str) -> None:
    """Answering every question right in the session grades full marks, for every bank."""
    s = QuizSession(name, learner="wang5")
    for q in s.questions:
        assert s.answer(q.id, _right(s, q.id)).correct
    sub = json.loads(json.dumps(s.to_submission()))  # through JSON, like an exported file
    assert sub["_learner"] == "wang5" and "_seed" not in sub and "_shown" not in sub
    for q in s.questions:                             # answers are stable option ids
        if q.kind != "numeric":
            assert sub[q.id] == q.expected_ids()
    r = grade_submission(sub)
    assert r["bank"] == name and r["score"] == r["total"] == s.score


def test_session_seeded_numbers_follow_the_learner() -> None:
    a, b = QuizSession("ch05", learner="zhang3"), QuizSession("ch05", learner="zhang3")
    assert {k: v.stem for k, v in a.instances.items()} == {k: v.stem for k, v in b.instances.items()}
    stems = {QuizSession("ch05", learner=f"x{i}").instances["ch05-1"].stem for i in range(20)}
    assert len(stems) > 3
    fb = a.answer("ch05-1", 1.0)
    assert not fb.correct and fb.tolerance == "±1%"
    p = a.instances["ch05-1"].params
    assert f"{p['f']}" in fb.explanation            # the explanation works the learner's numbers


def test_session_save(tmp_path: Path) -> None:
    s = QuizSession("ch02", learner="zhao6", n=3)
    ids = [q.id for q in s.questions]
    choice = next(qid for qid in ids if s.bank[qid].kind != "numeric")
    inst = s.instances[choice]
    key = s.bank[choice].expected_ids()
    assert s.answer(choice, inst.letter_of(key)).correct      # the letter this learner sees
    p = s.save(tmp_path / "sub" / "me.json")
    data = json.loads(p.read_text("utf-8"))
    assert data == {"_bank": "ch02", "_learner": "zhao6", "_shown": ids, choice: key}
    hand_picked = QuizSession("ch02", learner="zhao6", questions=["ch02-4", "ch02-1"])
    with pytest.raises(ValueError, match="用 n=… 按学员 id 抽题"):
        hand_picked.to_submission()


def test_partial_quiz_export_counts_only_the_shown_questions() -> None:
    s = QuizSession("ch02", learner="li4", n=5)
    assert [q.id for q in s.questions] == load_bank("ch02").pick(5, seed_for("li4"))
    for q in s.questions[:2]:
        s.answer(q.id, s.instances[q.id].expected)
    r = grade_submission(s.to_submission())
    assert (r["score"], r["total"], r["bank_total"]) == (2, 5, 7)


def test_options_are_shuffled_per_learner_and_grading_ignores_the_order() -> None:
    orders = {tuple(QuizSession("ch06", learner=f"p{i}").instances["ch06-5"].option_ids.values())
              for i in range(30)}
    assert len(orders) > 6                            # learners see different orders
    a = QuizSession("ch06", learner="p1")
    assert a.instances == QuizSession("ch06", learner="p1").instances   # reproducible
    assert list(QuizSession("ch06", learner="p1", article_order=True)
                .instances["ch06-5"].option_ids.values()) == load_bank("ch06")["ch06-5"].option_ids
    iv = QuizSession("interview", learner="p1")       # the article's order, always
    assert list(iv.instances["Q1"].options) == ["A", "B", "C", "D"]
    assert list(iv.instances["Q1"].option_ids.values()) == load_bank("interview")["Q1"].option_ids
    for i in range(10):                               # the key, whatever letter it shows under
        s = QuizSession("ch06", learner=f"p{i}")
        letter = s.instances["ch06-5"].expected
        fb = s.answer("ch06-5", letter)
        assert fb.correct and s.to_submission()["ch06-5"] == "reject"


def test_wrong_answer_feedback_names_the_misconception() -> None:
    s = QuizSession("ch06", learner="p3")
    wrong = s.instances["ch06-5"].letter_of("reject-metric")
    fb = s.answer("ch06-5", wrong)
    assert not fb.correct and fb.given == wrong and fb.expected == s.instances["ch06-5"].letter_of("reject")
    text = fb.text()
    assert f"{wrong}：不对。误解：以为队列满的拒绝会计入" in text and "PolicyQueue::Enqueue" in text


def test_anonymous_seeded_session_cannot_export_numbers_it_drew() -> None:
    s = QuizSession("ch05", seed=3)
    with pytest.raises(ValueError, match="导出答案需要学员 id"):
        s.to_submission()
    assert QuizSession("ch05").to_submission() == {"_bank": "ch05"}      # default numbers: fine
    with pytest.raises(ValueError, match="not both"):
        QuizSession("ch05", seed=3, learner="zhang3")


def test_render_text_hides_answers() -> None:
    text = render_text("interview")
    for q in load_bank("interview"):
        assert q.raw["question"] in text
        for opt in q.options.values():
            assert opt in text
    assert "答案" not in text and "解析" not in text and "Q3 [多选 · mid · 全对才得分]" in text
    full = render_text("interview", answers=True)
    assert full.count("答案：") == 10 and full.count("勘误：") == 5
    assert "选项按原顺序" in render_text("ch02") and "选项按学员顺序" in render_text("ch02", learner="z")
    seeded = render_text("ch05", learner="zhang3")
    assert "seed = " in seeded and "容差 ±1%" in seeded


# --- the widget, headless -------------------------------------------------------------------


def test_widget_builds_and_grades_without_a_frontend(tmp_path: Path) -> None:
    quiz = Quiz("ch03", learner="zhao6", export_path=tmp_path / "out.json")
    assert set(quiz.views) == set(load_bank("ch03").ids)
    single = quiz.views["ch03-4"]
    inst = quiz.session.instances["ch03-4"]
    assert [v for _, v in single.input.options] == list(inst.option_ids.values())   # values: ids
    assert [label[0] for label, _ in single.input.options] == ["A", "B", "C", "D"]
    assert single.input.value is None                 # nothing preselected
    fb = quiz.answer("ch03-4", inst.expected)         # the displayed letter of the key
    assert fb.correct and "正确" in single.feedback.value and single.button.disabled
    assert "得分 1 / 7" in quiz.score.value
    fb = quiz.answer("ch03-7", ["kv-cap"])            # multi: all-or-nothing, by id
    assert not fb.correct and "错误" in quiz.views["ch03-7"].feedback.value
    assert "这一项应选" in quiz.views["ch03-7"].feedback.value      # the missed key says why
    num = quiz.views["ch03-2"]
    num.input.value = "abc"
    assert num.submit() is None and "请输入一个数字" in num.feedback.value and not num.button.disabled
    num.input.value = ""
    assert num.submit() is None and "请先作答" in num.feedback.value
    want = quiz.session.instances["ch03-2"].expected
    num.input.value = f"{want:,.0f}"                  # thousands separators are accepted
    assert num.submit().correct
    quiz._export_clicked()
    assert "已导出" in quiz.export_msg.value
    data = json.loads((tmp_path / "out.json").read_text("utf-8"))
    assert data["_learner"] == "zhao6" and data["ch03-4"] == "route"
    r = grade_submission(data)
    assert r["score"] == quiz.session.score == 2


def test_widget_export_without_learner_id_says_what_to_do(tmp_path: Path) -> None:
    quiz = Quiz("ch05", seed=5, export_path=tmp_path / "x.json")
    quiz._export_clicked()
    assert "导出失败" in quiz.export_msg.value and "学员 id" in quiz.export_msg.value
    assert not (tmp_path / "x.json").exists()


def test_widget_display_carries_a_text_rendering() -> None:
    quiz = Quiz("interview")
    bundle = quiz._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    text = bundle["text/plain"]
    assert all(f"{qid} [" in text for qid in quiz.views) and "答案" not in text
    assert repr(quiz) == text


def test_show_quiz_headless_returns_text(capsys, monkeypatch) -> None:
    monkeypatch.delenv("BATCHLAB_HEADLESS", raising=False)
    assert headless()                                 # plain pytest: no kernel
    text = show_quiz("interview")
    assert isinstance(text, str) and "Q10" in text
    assert capsys.readouterr().out.strip() == text.strip()
    monkeypatch.setenv("BATCHLAB_HEADLESS", "1")
    assert headless()


def test_display_chapter_quiz_picks_n_questions(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("BATCHLAB_LEARNER", raising=False)
    monkeypatch.setenv("BATCHLAB_CONFIG_DIR", str(tmp_path))
    text = display_chapter_quiz("03", n=3)
    assert "（3 题）" in text and "ch03-1" in text and "ch03-4" not in text
    a = display_chapter_quiz(5, n=3, learner="zhang3")
    assert a == display_chapter_quiz("05", n=3, learner="zhang3") and "（3 题）" in a
    with pytest.raises(ValueError):
        display_chapter_quiz("12")
    with pytest.raises(ValueError):
        display_chapter_quiz("03", n=0)


def test_widget_css_hooks_for_browser_tests() -> None:
    quiz = Quiz("interview")
    view = quiz.views["Q1"]
    assert "batchlab-quiz" in quiz.widget._dom_classes
    assert "batchlab-question" in view.box._dom_classes
    assert "batchlab-submit" in view.button._dom_classes
    assert "batchlab-feedback" in view.feedback._dom_classes
