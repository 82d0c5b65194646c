"""The labs' checks (Chinese feedback, a ``[score] labL.qN s/max`` line) and what a lab imports
(`labkit`); `python -m batchlab.labs scores NOTEBOOK...` reads the score lines stored in executed labs.
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
