"""Quizzes: question banks (quiz/*.json), grading, the notebook widget and a CLI.

    from batchlab.quiz import load_bank, grade_submission, show_quiz, display_chapter_quiz
    python -m batchlab.quiz grade FILE [FILE...] [--bank interview] [--csv OUT]

The widget parts (`Quiz`, `show_quiz`, `display_chapter_quiz`) import ipywidgets on first use.
"""

from __future__ import annotations

from typing import Any

from batchlab.quiz.bank import Bank, Question, list_banks, load_all, load_bank, quiz_dir
from batchlab.quiz.grade import (
    SubmissionError,
    check_answer,
    grade_file,
    grade_files,
    grade_submission,
    write_csv,
)
from batchlab.quiz.params import FORMULAS, seed_for
from batchlab.quiz.session import Feedback, QuizSession, render_text

__all__ = [
    "Bank", "FORMULAS", "Feedback", "Question", "Quiz", "QuizSession", "SubmissionError",
    "check_answer", "display_chapter_quiz", "grade_file", "grade_files", "grade_submission",
    "list_banks", "load_all", "load_bank", "quiz_dir", "render_text", "seed_for", "show_quiz",
    "write_csv",
]

_WIDGET = ("Quiz", "show_quiz", "display_chapter_quiz", "headless")


def __getattr__(name: str) -> Any:
    if name in _WIDGET:
        from batchlab.quiz import widget  # lazy: ipywidgets only when a widget is asked for

        return getattr(widget, name)
    raise AttributeError(f"module 'batchlab.quiz' has no attribute {name!r}")
