"""The notebook quiz: an ipywidgets view over `QuizSession` (widget values are the stable option ids);
`show_quiz` prints the questions when there is no kernel. Nothing here waits for input.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import ipywidgets as W
from IPython import get_ipython
from IPython.display import display

from batchlab.quiz.bank import Bank
from batchlab.quiz.learner import current_learner
from batchlab.quiz.session import Feedback, QuizSession, question_header


def headless() -> bool:
    """True when no Jupyter kernel can show widgets (or `BATCHLAB_HEADLESS=1`)."""
    return (os.environ.get("BATCHLAB_HEADLESS", "").lower() in ("1", "true", "yes")
            or getattr(get_ipython(), "kernel", None) is None)


def _html_text(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


class _QuestionView:
    """Widgets for one question: stem, input, 提交 button, feedback area."""

    def __init__(self, quiz: "Quiz", qid: str) -> None:
        self.quiz, self.qid = quiz, qid
        q = quiz.session.question(qid)
        inst = quiz.session.instances[qid]
        self.kind = q.kind
        self.stem = W.HTML(f"<b>{_html_text(question_header(q, inst))}</b>")
        full = W.Layout(width="100%")
        if q.kind == "single":
            self.input: Any = W.RadioButtons(
                options=[(f"{k}. {v}", inst.option_ids[k]) for k, v in inst.options.items()],
                value=None, layout=full)
        elif q.kind == "multi":
            self.boxes = {inst.option_ids[k]: W.Checkbox(value=False, description=f"{k}. {v}",
                                                         indent=False, layout=full)
                          for k, v in inst.options.items()}
            self.input = W.VBox(list(self.boxes.values()))
        else:
            self.input = W.Text(placeholder="输入数字", layout=W.Layout(width="12em"))
        inputs = [W.HBox([self.input, W.Label(q.unit or "")])] if q.kind == "numeric" else [self.input]
        self.button = W.Button(description="提交", button_style="primary")
        self.button.add_class("batchlab-submit")
        self.button.on_click(lambda _b: self.submit())
        self.feedback = W.HTML("")
        self.feedback.add_class("batchlab-feedback")
        self.box = W.VBox([self.stem, *inputs, self.button, self.feedback],
                          layout=W.Layout(border="1px solid #ddd", padding="6px", margin="4px 0"))
        self.box.add_class("batchlab-question")

    def value(self) -> Any:
        """The answer currently entered (None if nothing)."""
        if self.kind == "single":
            return self.input.value
        if self.kind == "multi":
            return [k for k, b in self.boxes.items() if b.value]
        text = self.input.value.strip().replace("，", "").replace(",", "")
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            return text  # not a number: submit() asks again

    def set_value(self, value: Any) -> None:
        """Enter an answer programmatically (used by tests and the notebook demo): displayed
        letters or option ids for choice questions."""
        value = self.quiz.session.to_ids(self.qid, value)
        if self.kind == "single":
            self.input.value = value
        elif self.kind == "multi":
            for k, b in self.boxes.items():
                b.value = k in value
        else:
            self.input.value = "" if value is None else str(value)

    def submit(self) -> Feedback | None:
        """Grade the entered answer, show the feedback, lock the question."""
        value = self.value()
        if value is None:
            self.feedback.value = "<i>请先作答。</i>"
            return None
        if isinstance(value, str) and self.kind == "numeric":
            self.feedback.value = f"<i>请输入一个数字（你输入的是 {html.escape(value)}）。</i>"
            return None
        try:
            fb = self.quiz.session.answer(self.qid, value)
        except ValueError as e:  # a SubmissionError: a malformed answer
            self.feedback.value = f"<i>{html.escape(str(e))}</i>"
            return None
        color = "#e6f4ea" if fb.correct else "#fdecea"
        self.feedback.value = (f"<div style='background:{color};padding:6px'>"
                               f"{_html_text(fb.text())}</div>")
        self.button.disabled = True
        for w in (self.boxes.values() if self.kind == "multi" else [self.input]):
            w.disabled = True
        self.quiz._refresh()
        return fb


class Quiz:
    """An interactive quiz over one bank (arguments as `QuizSession`'s); `session` holds the
    state, `widget` is the view, `export_path` the file 导出答案 writes by default."""

    def __init__(
        self, bank: Bank | str = "interview", seed: int | None = None,
        learner: str | None = None, n: int | None = None, export_path: str | Path | None = None,
    ) -> None:
        self.session = QuizSession(bank, seed=seed, learner=learner, n=n)
        b = self.session.bank
        self.export_path = Path(export_path or f"answers_{b.name}_{self.session.learner or 'me'}.json")
        self.views = {q.id: _QuestionView(self, q.id) for q in self.session.questions}
        self.score = W.HTML(f"<b>{self.session.score_text()}</b>")
        self.path_box = W.Text(value=str(self.export_path), description="文件",
                               layout=W.Layout(width="28em"))
        self.export_button = W.Button(description="导出答案", icon="download")
        self.export_button.on_click(lambda _b: self._export_clicked())
        self.export_msg = W.HTML("")
        who_text = (f"学员 {html.escape(self.session.learner)}" if self.session.learner
                    else "未设置学员 id（导出前先在 quiz/quiz.ipynb 里设置）")
        title = W.HTML(f"<h4>题库 {html.escape(b.name)}：{len(self.views)} 题 · {who_text}</h4>")
        self.widget = W.VBox([title, *[v.box for v in self.views.values()], self.score,
                              W.HBox([self.path_box, self.export_button]), self.export_msg])
        self.widget.add_class("batchlab-quiz")  # CSS hooks: quiz, question, submit, feedback

    def _refresh(self) -> None:
        self.score.value = f"<b>{self.session.score_text()}</b>"

    def _export_clicked(self) -> None:
        try:
            p = self.export(self.path_box.value.strip() or None)
        except (OSError, ValueError) as e:
            self.export_msg.value = f"<i>导出失败：{html.escape(str(e))}</i>"
            return
        self.export_msg.value = (f"已导出到 <code>{html.escape(str(p.resolve()))}</code>；"
                                 f"批改：<code>python -m batchlab.quiz grade {html.escape(p.name)}</code>")

    def answer(self, qid: str, value: Any) -> Feedback | None:
        """Enter `value` for `qid` in the widget and press 提交 (what a learner's click does)."""
        self.views[qid].set_value(value)
        return self.views[qid].submit()

    def export(self, path: str | Path | None = None) -> Path:
        """Write the answers so far in the grader's submission format; returns the path."""
        return self.session.save(path or self.export_path)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude) or {}
        bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self) -> str:
        """The questions as plain text (no answers), as shown headless."""
        return self.session.render_text()


def show_quiz(
    bank: Bank | str = "interview", seed: int | None = None, learner: str | None = None, n: int | None = None,
) -> str | None:
    """Show a quiz: the widget in a Jupyter kernel (returns None), else print and return its text."""
    quiz = Quiz(bank, seed=seed, learner=learner, n=n)
    if headless():
        text = quiz.session.render_text()
        print(text)
        return text
    display(quiz)
    return None


def display_chapter_quiz(
    chapter: str | int, n: int | None = None, seed: int | None = None,
    learner: str | None = None,
) -> str | None:
    """A chapter's 自测题: `show_quiz` on bank `chNN` for `learner`, else the remembered one
    (`current_learner()`); without a learner `seed` draws, so stored outputs match everywhere."""
    ch = f"{int(chapter):02d}" if str(chapter).isdigit() else str(chapter)
    if ch not in {f"{i:02d}" for i in range(12)}:
        raise ValueError(f"chapter must be 00 … 11, got {chapter!r}")
    who = learner if learner is not None else current_learner()
    return show_quiz(f"ch{ch}", seed=None if who else seed, learner=who, n=n)
