"""Quiz state without widgets: answers, feedback, score, export; and plain-text rendering.

`QuizSession` is what the notebook widget drives (the widget is a thin view over it), and what
tests exercise directly. Its `to_submission()` is exactly the format the grader reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from batchlab._validate import optional_count
from batchlab.quiz.bank import Bank, Instance, Question, load_bank
from batchlab.quiz.grade import check_answer
from batchlab.quiz.params import fmt_number, seed_for

__all__ = [
    "Feedback", "QuizSession", "format_answer", "question_header", "render_question", "render_text",
]

KIND_LABEL = {"single": "单选", "multi": "多选", "numeric": "数值"}


def format_answer(value: Any) -> str:
    """An answer as shown to learners: `B`, `A、B`, a number, or `（未作答）`."""
    if value is None:
        return "（未作答）"
    if isinstance(value, list):
        return "、".join(value) if value else "（空）"
    if isinstance(value, float):
        return fmt_number(value)
    return str(value)


@dataclass(frozen=True)
class Feedback:
    """The outcome of one answer, with the explanation to show after it."""

    qid: str
    correct: bool
    expected: Any
    given: Any
    explanation: str
    erratum: str | None = None
    key_note: str | None = None
    tolerance: str | None = None

    @property
    def verdict(self) -> str:
        """`正确` or `错误`."""
        return "正确" if self.correct else "错误"

    def text(self) -> str:
        """Feedback as plain text: verdict, the key, the explanation, and any 勘误/key note."""
        head = f"{self.qid} {self.verdict}。"
        if not self.correct:
            head += f"你的答案：{format_answer(self.given)}；正确答案：{format_answer(self.expected)}"
            if self.tolerance:
                head += f"（容差 {self.tolerance}）"
            head += "。"
        lines = [head, f"解析：{self.explanation}"]
        if self.erratum:
            lines.append(f"勘误：{self.erratum}")
        if self.key_note:
            lines.append(f"关于答案：{self.key_note}")
        return "\n".join(lines)


def question_header(q: Question, inst: Instance) -> str:
    """`Q3 [多选 · mid · 全对才得分] stem`: id, kind, difficulty, tolerance, then the stem."""
    tags = [KIND_LABEL[q.kind], q.difficulty]
    if q.kind == "multi":
        tags.append("全对才得分")
    if q.kind == "numeric":
        tags.append(f"容差 {q.tolerance_text()}")
        if q.unit:
            tags.append(f"单位 {q.unit}")
    return f"{q.id} [{' · '.join(tags)}] {inst.stem}"


def render_question(q: Question, seed: int | None = None, answers: bool = False) -> str:
    """One question as text: header line, options, and with `answers=True` the key and why."""
    inst = q.instance(seed)
    lines = [question_header(q, inst)]
    lines += [f"  {k}. {v}" for k, v in inst.options.items()]
    if answers:
        lines.append(f"  答案：{format_answer(inst.expected)}")
        lines.append(f"  解析：{inst.explanation}")
        if q.erratum:
            lines.append(f"  勘误：{q.erratum}")
        if q.key_note:
            lines.append(f"  关于答案：{q.key_note}")
    return "\n".join(lines)


def render_text(
    bank: Bank | str = "interview", seed: int | None = None, learner: str | None = None,
    answers: bool = False, questions: Sequence[str] | None = None,
) -> str:
    """A bank (or the listed question ids) as plain text; answers hidden unless `answers`."""
    b = bank if isinstance(bank, Bank) else load_bank(bank)
    if seed is None and learner:
        seed = seed_for(learner)
    qs = [b[qid] for qid in questions] if questions is not None else list(b)
    head = f"题库 {b.name}（{len(qs)} 题）"
    if any(q.seeded for q in qs):
        who = f"学员 {learner}，" if learner else ""
        head += f"，{who}seed = {seed}" if seed is not None else "，数值题用默认参数（未设 seed）"
    blocks = [head] + [render_question(q, seed, answers) for q in qs]
    return "\n\n".join(blocks) + "\n"


class QuizSession:
    """A learner's run through a bank: record answers, give feedback, keep the score.

    `seed` (or a `learner` id it is derived from) fixes the numbers of seeded questions.
    `questions` limits the session to some ids (default: the whole bank).
    """

    def __init__(
        self, bank: Bank | str = "interview", seed: int | None = None,
        learner: str | None = None, questions: Sequence[str] | None = None,
    ) -> None:
        self.bank = bank if isinstance(bank, Bank) else load_bank(bank)
        if learner is not None and (not isinstance(learner, str) or not learner.strip()):
            raise ValueError("learner must be a non-empty string")
        self.learner = learner.strip() if learner else None
        if seed is None and self.learner:
            seed = seed_for(self.learner)
        optional_count("seed", seed, lo=0)
        self.seed = seed
        ids = list(questions) if questions is not None else self.bank.ids
        unknown = [qid for qid in ids if qid not in self.bank]
        if unknown:
            raise ValueError(f"unknown question id {unknown[0]!r} in bank {self.bank.name}")
        self.questions: list[Question] = [self.bank[qid] for qid in ids]
        self.instances: dict[str, Instance] = {q.id: q.instance(seed) for q in self.questions}
        self.answers: dict[str, Any] = {}
        self.results: dict[str, bool] = {}

    def question(self, qid: str) -> Question:
        """The question `qid` of this session; KeyError if it is not in the session."""
        if qid not in self.instances:
            raise KeyError(f"{qid} is not in this quiz")
        return self.bank[qid]

    def answer(self, qid: str, value: Any) -> Feedback:
        """Record an answer (a letter, a list of letters, or a number) and return the feedback.

        A malformed answer raises `ValueError` (a `SubmissionError`) and records nothing; a new
        answer to the same question replaces the old one.
        """
        q = self.question(qid)
        ok, expected, given = check_answer(q, value, self.seed)
        if given is None:
            raise ValueError(f"{qid}: no answer given")
        self.answers[qid] = given
        self.results[qid] = ok
        return Feedback(qid, ok, expected, given, self.instances[qid].explanation, q.erratum,
                        q.key_note,
                        q.tolerance_text() if q.kind == "numeric" else None)

    @property
    def score(self) -> int:
        """Number of questions answered correctly."""
        return sum(self.results.values())

    @property
    def answered(self) -> int:
        """Number of questions answered."""
        return len(self.results)

    @property
    def total(self) -> int:
        """Number of questions in the session."""
        return len(self.questions)

    def score_text(self) -> str:
        """`得分 3 / 10（已答 4 题）`."""
        return f"得分 {self.score} / {self.total}（已答 {self.answered} 题）"

    def to_submission(self) -> dict[str, Any]:
        """The answers in the grader's submission format (with `_bank`, `_learner`, `_seed`)."""
        sub: dict[str, Any] = {"_bank": self.bank.name}
        if self.learner:
            sub["_learner"] = self.learner
        if self.seed is not None:
            sub["_seed"] = self.seed
        for q in self.questions:
            if q.id in self.answers:
                sub[q.id] = self.answers[q.id]
        return sub

    def save(self, path: str | Path) -> Path:
        """Write `to_submission()` as JSON to `path` (folders created); returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_submission(), ensure_ascii=False, indent=2) + "\n",
                     encoding="utf-8")
        return p

    def render_text(self, answers: bool = False) -> str:
        """This session's questions as text (answers hidden unless `answers`)."""
        return render_text(self.bank, self.seed, self.learner, answers,
                           [q.id for q in self.questions])
