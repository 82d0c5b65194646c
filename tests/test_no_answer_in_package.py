"""No public function of the installed package answers a lab question.

Every public function (and public class method) of the library's pure layers that can be called
with a question's arguments is handed to that question's check as if it were the learner's answer;
none may earn full marks. (The checks name the library functions that would: `shortcuts`.)
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil
import signal
import tempfile

import pytest

import batchlab
from batchlab.labs import lab1, lab2, lab3, lab4, lab5, lab6

#: Checks that need no server, and how many positional arguments the learner's function takes.
CHECKS = [
    (lab1.check_config_summary, 1), (lab1.check_batch_summary, 1), (lab1.check_metric_value, 3),
    (lab2.check_next_batch, 3), (lab2.check_dynamic_batching_block, 2), (lab2.check_predict_sweep, 5),
    (lab2.check_best_under_slo, 2),
    (lab3.check_oldest_block, 3), (lab3.check_assign, 2), (lab4.check_admit, 4), (lab4.check_chunks, 3),
    (lab4.check_eta, 2),
    (lab4.check_with_limits, 3), (lab4.check_pool_blocks, 3),
    (lab5.check_burst, 6), (lab5.check_guard_block, 2), (lab5.check_priority_block, 1),
    (lab5.check_counter_rates, 2), (lab6.check_roofline_time, 5), (lab6.check_ridge_batch, 3),
    (lab6.check_knee, 2),
]
SKIP_PARTS = ("model_repository", "__main__", "server", "start", "labs", "classroom", "tools", "bench", "viz",
              "probe", "models", "plotting", "quiz.widget")


def _public_callables() -> list:
    found = {}
    for info in pkgutil.walk_packages(batchlab.__path__, "batchlab."):
        if any(part in info.name for part in SKIP_PARTS):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:
            continue
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", "") != info.name:
                continue
            if inspect.isfunction(obj):
                found[f"{info.name}.{name}"] = obj
            elif inspect.isclass(obj):
                for mname, meth in vars(obj).items():
                    if not mname.startswith("_") and inspect.isfunction(meth):
                        found[f"{info.name}.{name}.{mname}"] = meth
    return sorted(found.items())


class _Slow(BaseException):  # not an Exception: a check's g.call must not swallow it
    pass


def _bindable(fn, n: int) -> bool:
    try:
        inspect.signature(fn).bind(*range(n))
    except (TypeError, ValueError):
        return False
    return True


@pytest.mark.slow
def test_no_public_function_earns_full_marks(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what the calls stage lands here
    functions = _public_callables()
    assert len(functions) > 50
    winners, slow = [], set()

    def stop(signum, frame):
        raise _Slow("too slow")

    old = signal.signal(signal.SIGALRM, stop)
    try:
        for check, n in CHECKS:
            for name, fn in functions:
                if name in slow or not _bindable(fn, n):
                    continue
                signal.setitimer(signal.ITIMER_REAL, 0.75)  # an experiment run with wrong arguments: not an answer
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        result = check(fn)
                except _Slow:  # an experiment (a simulation, a sweep): no question asks for one, so not tried again
                    slow.add(name)
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if result.passed:
                    winners.append(f"{name} answers {result.qid}")
    finally:
        signal.signal(signal.SIGALRM, old)
    assert winners == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # a call that failed left no folder behind
