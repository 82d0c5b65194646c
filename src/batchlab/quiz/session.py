"""Quiz state without widgets (`QuizSession`: answers, feedback, score, the grader's submission)
and plain-text rendering. A learner id fixes the numbers, the questions a short quiz draws and
the option order; answers are recorded by option id, so an export grades the same whatever order
was shown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from batchlab._validate import optional_count
from batchlab.quiz.bank import DEFAULT_FEEDBACK, Bank, Instance, Question, load_bank
from batchlab.quiz.grade import SubmissionError, check_answer, normalize_answer
from batchlab.quiz.learner import check_learner
from batchlab.quiz.params import fmt_number, seed_for

_KIND_LABEL = {"single": "单选", "multi": "多选", "numeric": "数值"}
_DEFAULT_FEEDBACK = set(DEFAULT_FEEDBACK.values())


def _format_answer(value: Any) -> str:
    """An answer as shown to learners: `B`, `A、B`, a number, or `（未作答）`."""
    if value is None:
        return "（未作答）"
    if isinstance(value, list):
        return "、".join(value) or "（空）"
    return fmt_number(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Feedback:
    """The outcome of one answer in the letters this learner saw; `notes`: `(letter, feedback)`
    of each option the learner got wrong."""

    qid: str
    correct: bool
    expected: Any
    given: Any
    explanation: str
    erratum: str | None = None
    key_note: str | None = None
    tolerance: str | None = None
    notes: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def text(self) -> str:
        """Verdict, key, each wrong choice's feedback, explanation, 勘误 and key note as text."""
        head = f"{self.qid} {'正确' if self.correct else '错误'}。"
        if not self.correct:
            head += f"你的答案：{_format_answer(self.given)}；正确答案：{_format_answer(self.expected)}"
            if self.tolerance:
                head += f"（容差 {self.tolerance}）"
            head += "。"
        lines = [head, *(f"{letter}：{text}" for letter, text in self.notes), f"解析：{self.explanation}"]
        return "\n".join(lines + _notes(self.erratum, self.key_note, ""))


def _notes(erratum: str | None, key_note: str | None, indent: str) -> list[str]:
    return [f"{indent}{label}：{text}" for label, text in (("勘误", erratum), ("关于答案", key_note)) if text]


def question_header(q: Question, inst: Instance) -> str:
    """`Q3 [多选 · mid · 全对才得分] stem`: id, kind, difficulty, tolerance, then the stem."""
    tags = [_KIND_LABEL[q.kind], q.difficulty, *(["全对才得分"] if q.kind == "multi" else [])]
    if q.kind == "numeric":
        tags += [f"容差 {q.tolerance_text()}", *([f"单位 {q.unit}"] if q.unit else [])]
    return f"{q.id} [{' · '.join(tags)}] {inst.stem}"


def _render_question(q: Question, inst: Instance, answers: bool) -> str:
    """One question as text (options in the instance's order); with `answers` the key and why."""
    lines = [question_header(q, inst), *(f"  {k}. {v}" for k, v in inst.options.items())]
    if answers:
        lines += [f"  答案：{_format_answer(inst.expected)}", f"  解析：{inst.explanation}",
                  *_notes(q.erratum, q.key_note, "  ")]
    return "\n".join(lines)


class QuizSession:
    """A learner's run through a bank: answers, feedback, score. `learner` (or without one
    `seed`) fixes what is shown; `n` draws that many questions, `questions` names them."""

    def __init__(
        self, bank: Bank | str = "interview", seed: int | None = None,
        learner: str | None = None, questions: Sequence[str] | None = None,
        n: int | None = None, article_order: bool = False,
    ) -> None:
        self.bank = bank if isinstance(bank, Bank) else load_bank(bank)
        self.learner = check_learner(learner) if learner is not None else None
        optional_count("seed", seed, lo=0)
        if self.learner is not None:
            if seed is not None and seed != seed_for(self.learner):
                raise ValueError("give a learner id or a seed, not both: with a learner id the "
                                 "seed is derived from it")
            seed = seed_for(self.learner)
        self.seed, self.article_order = seed, bool(article_order)
        if questions is not None and n is not None:
            raise ValueError("give questions= or n=, not both")
        ids = list(questions) if questions is not None else self.bank.pick(n, seed)
        unknown = [qid for qid in ids if qid not in self.bank]
        if unknown:
            raise ValueError(f"unknown question id {unknown[0]!r} in bank {self.bank.name}")
        self.questions: list[Question] = [self.bank[qid] for qid in ids]
        self.instances: dict[str, Instance] = {
            q.id: q.instance(seed, self.article_order) for q in self.questions}
        self.answers: dict[str, Any] = {}
        self.results: dict[str, bool] = {}

    def question(self, qid: str) -> Question:
        """The question `qid` of this session; KeyError if it is not in the session."""
        if qid not in self.instances:
            raise KeyError(f"{qid} is not in this quiz")
        return self.bank[qid]

    def to_ids(self, qid: str, value: Any) -> Any:
        """Displayed letters (as this learner saw them) → option ids; ids and numbers pass through."""
        q, inst = self.question(qid), self.instances[qid]

        def one(v: Any) -> Any:
            return inst.option_ids.get(v.strip().upper(), v) if isinstance(v, str) else v

        if q.kind == "multi" and isinstance(value, list):
            return [one(v) for v in value]
        return one(value) if q.kind == "single" else value

    def _letters(self, q: Question, ids: Any) -> Any:
        if ids is None or q.kind == "numeric":
            return ids
        inst = self.instances[q.id]
        return inst.letter_of(ids) if q.kind == "single" else sorted(map(inst.letter_of, ids))

    def answer(self, qid: str, value: Any) -> Feedback:
        """Record an answer (displayed letters or option ids, or a number; a new one replaces
        the old) and return the feedback; a malformed one raises `SubmissionError`."""
        q = self.question(qid)
        if value is None:
            raise SubmissionError(f"{qid}: no answer given")
        given = normalize_answer(q, self.to_ids(qid, value), letters_ok=False)
        ok = check_answer(q, given, self.seed, letters_ok=False)[0]
        key = q.expected_ids(self.seed)
        expected = float(f"{key:.10g}") if q.kind == "numeric" else key
        self.answers[qid] = given
        self.results[qid] = ok
        notes: list[tuple[str, str]] = []
        if not ok and q.kind != "numeric":
            chosen = {given} if q.kind == "single" else set(given)
            keyed = {key} if q.kind == "single" else set(key)
            notes = [(self.instances[qid].letter_of(i), q.option(i)["feedback"])
                     for i in self.instances[qid].option_ids.values()
                     if (i in chosen) != (i in keyed) and (i in chosen or q.kind == "multi")
                     and q.option(i)["feedback"] not in _DEFAULT_FEEDBACK]
        return Feedback(qid, ok, self._letters(q, expected), self._letters(q, given),
                        self.instances[qid].explanation, q.erratum, q.key_note,
                        q.tolerance_text() if q.kind == "numeric" else None, tuple(notes))

    @property
    def score(self) -> int:
        """Number of questions answered correctly."""
        return sum(self.results.values())

    def score_text(self) -> str:
        """`得分 3 / 10（已答 4 题）`."""
        return f"得分 {self.score} / {len(self.questions)}（已答 {len(self.results)} 题）"

    def to_submission(self) -> dict[str, Any]:
        """The answers in the grader's format (`_bank`, `_learner`, `_shown`, one per answered
        question); ValueError saying why (Chinese, one line) when the grader could not grade them."""
        if self.learner is None and self.seed is not None and any(q.seeded for q in self.questions):
            raise ValueError("导出答案需要学员 id：数值题的参数由学员 id 决定。先在 quiz/quiz.ipynb 里设置你的学员 id"
                             "（remember_learner），或给本测验传 learner=…")
        ids = [q.id for q in self.questions]
        if (self.learner is not None and len(ids) < len(self.bank)
                and sorted(ids) != sorted(self.bank.pick(len(ids), self.seed))):
            raise ValueError("这份测验只含指定的几道题，批改器无法核对它们是抽给这位学员的：要导出给老师批改，"
                             "用 n=… 按学员 id 抽题")
        sub: dict[str, Any] = {"_bank": self.bank.name, **({"_learner": self.learner} if self.learner else {})}
        if len(self.questions) < len(self.bank):
            sub["_shown"] = [q.id for q in self.questions]
        return sub | {q.id: self.answers[q.id] for q in self.questions if q.id in self.answers}

    def save(self, path: str | Path) -> Path:
        """Write `to_submission()` as JSON to `path` (folders created); returns the path."""
        sub, p = self.to_submission(), Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(sub, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        return p

    def render_text(self, answers: bool = False) -> str:
        """This session's questions as text (answers hidden unless `answers`)."""
        seed, learner, qs = self.seed, self.learner, self.questions
        head = f"题库 {self.bank.name}（{len(qs)} 题）"
        who = f"学员 {learner}，" if learner else ""
        if any(q.seeded for q in qs):
            head += f"，{who}seed = {seed}" if seed is not None else "，数值题用默认参数（未设学员 id）"
            who = ""
        if any(q.shuffled for q in qs):
            if self.article_order or seed is None:
                head += "，选项按原顺序"
            elif learner:
                head += f"，{who}选项按学员顺序排列（--article-order 看原顺序）"
            else:
                head += "，选项按 seed 打乱（未设学员 id）"
        blocks = [head] + [_render_question(q, self.instances[q.id], answers) for q in qs]
        return "\n\n".join(blocks) + "\n"


def render_text(
    bank: Bank | str = "interview", seed: int | None = None, learner: str | None = None,
    answers: bool = False, questions: Sequence[str] | None = None, article_order: bool = False,
) -> str:
    """A bank (or the listed ids) as text for a learner (or a seed); answers only with `answers`."""
    session = QuizSession(bank, None if learner is not None else seed, learner, questions,
                          article_order=article_order)
    return session.render_text(answers)

