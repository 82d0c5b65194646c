"""Quizzes over the banks in quiz/: load and validate, seeded numbers, grade, quiz sessions and
widgets, item audit and statistics, export, and the CLI `python -m batchlab.quiz`.
"""

from __future__ import annotations

from typing import Any

from batchlab.quiz.bank import Bank, Question, list_banks, load_all, load_bank, quiz_dir
from batchlab.quiz.export import moodle_xml, qti_package
from batchlab.quiz.grade import (SubmissionError, check_answer, grade_file, grade_files, grade_submission,
                                 write_csv)
from batchlab.quiz.learner import check_learner, current_learner, forget_learner, remember_learner
from batchlab.quiz.params import FORMULAS, seed_for
from batchlab.quiz.session import Feedback, QuizSession, render_text
from batchlab.quiz.stats import item_stats, stats_table

__all__ = [
    "Bank", "FORMULAS", "Feedback", "Question", "Quiz", "QuizSession", "SubmissionError",
    "check_answer", "check_learner", "current_learner", "display_chapter_quiz", "forget_learner",
    "grade_file", "grade_files", "grade_submission", "item_stats", "list_banks", "load_all",
    "load_bank", "moodle_xml", "qti_package", "quiz_dir", "remember_learner", "render_text",
    "seed_for", "show_quiz", "stats_table", "write_csv",
]

_WIDGET = ("Quiz", "show_quiz", "display_chapter_quiz", "headless")


def __getattr__(name: str) -> Any:
    if name in _WIDGET:
        from batchlab.quiz import widget  # lazy: ipywidgets only when a widget is asked for

        return getattr(widget, name)
    raise AttributeError(f"module 'batchlab.quiz' has no attribute {name!r}")
