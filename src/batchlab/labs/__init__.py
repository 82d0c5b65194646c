"""Check functions for the labs: Chinese feedback and a score line an instructor can collect.

Each lab has its own module (`batchlab.labs.lab1` … `lab6`); every function there is called
`check_…`, takes the learner's answer, prints what is right and what is wrong (in Chinese, never
only an assertion error) and ends with ``[score] labL.qN s/max``. See `batchlab.labs._core`.

    python -m batchlab.labs scores labs/*.ipynb     # the score lines stored in executed labs (a self-view)

Grades come from `python -m batchlab.classroom grade`, which re-executes each submission and
judges the check cells' evidence in its own process (`batchlab.labs._core`).
"""

import importlib

from batchlab.labs._core import Grader, Result, check, parse_scores, registry

LAB_MODULES = ("lab1", "lab2", "lab3", "lab4", "lab5", "lab6")


def load_checks() -> dict:
    """Import every lab's check module; return the registry {qid: {...}}."""
    for name in LAB_MODULES:
        importlib.import_module(f"batchlab.labs.{name}")
    return registry()


__all__ = ["Grader", "Result", "check", "parse_scores", "registry", "load_checks", "LAB_MODULES"]
