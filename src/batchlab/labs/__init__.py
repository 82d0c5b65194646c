"""The labs' checks (Chinese feedback, a ``[score] labL.qN s/max`` line) and what a lab imports.

    _core      the `check` decorator, `Grader`, evidence `replay` (scores decided by the grader)
    _evidence  evidence as JSON and back
    _blocks    a learner's config block read as Triton reads it, errors explained in Chinese
    labkit     a lab's server and private workspace; `needs` / `attempt` / `ready` after a TODO
    lab1 … lab6  each lab's checks
    __main__   `python -m batchlab.labs scores NOTEBOOK...`: the score lines stored in executed labs
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
