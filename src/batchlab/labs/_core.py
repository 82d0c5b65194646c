"""The machinery every lab check shares: Chinese feedback lines and one score line.

A check is a function decorated with `check(qid, points, title)`; its body receives a
`Grader` first and the learner's answer after it (the answer is the first argument; any other
argument has a default, so `check_x(None)` always works), and calls `g.expect(...)` once per point::

    @check("lab2.q1", points=2, title="dynamic_batching 块")
    def check_dynamic_batching(g: Grader, text: str) -> None:
        cfg = g.require(text, "dynamic_batching 块")
        g.expect("max_batch_size" not in cfg, "没有把 max_batch_size 写进块里", "max_batch_size 是模型级字段……")
        ...

Calling `check_dynamic_batching(answer)` in a notebook prints the feedback and a line such as
``[score] lab2.q1 2/2`` that an instructor can collect (`python -m batchlab.labs scores ...`),
and returns a `Result` (which displays nothing more in a notebook). It never raises: an
unfinished answer (`None`, or a function that still raises NotImplementedError) gets
"尚未完成" and score 0; an answer that raises gets the error named and score 0.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

SCORE_RE = re.compile(r"^\[score\] (?P<qid>\S+) (?P<score>\d+)/(?P<max>\d+)\s*$", re.M)
QID_RE = re.compile(r"^lab(?P<lab>\d+)\.q(?P<q>\d+)$")


class Pending(Exception):
    """The answer is not written yet."""


class Abort(Exception):
    """A check that cannot go on (the rest of its points are lost)."""


@dataclass
class Result:
    """The outcome of one check: score out of max_score, and the feedback lines printed."""

    qid: str
    score: int
    max_score: int
    lines: list[str] = field(default_factory=list)
    pending: bool = False

    @property
    def passed(self) -> bool:
        """Full marks."""
        return self.score == self.max_score

    @property
    def text(self) -> str:
        """The feedback as printed."""
        return "\n".join(self.lines)

    def score_line(self) -> str:
        """``[score] labN.qM score/max``."""
        return f"[score] {self.qid} {self.score}/{self.max_score}"

    def _ipython_display_(self) -> None:  # the printed lines already said everything
        return None

    def __repr__(self) -> str:
        return f"<Result {self.qid} {self.score}/{self.max_score}>"


def _short(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}".rstrip(": ")


class Grader:
    """Collects feedback and points while a check runs."""

    def __init__(self, qid: str, points: int, title: str) -> None:
        self.qid = qid
        self.points = points
        self.title = title
        self.earned = 0
        self.given = 0
        self.lines: list[str] = []
        self.problems = 0

    @property
    def number(self) -> int:
        """The question number N of ``labL.qN``."""
        m = QID_RE.match(self.qid)
        return int(m.group("q")) if m else 0

    def note(self, text: str) -> None:
        """An informational line (no points)."""
        self.lines.append(f"  · {text}")

    def expect(self, condition: Any, good: str, bad: str, points: int = 1) -> bool:
        """Award `points` if `condition` holds (and say `good`), else explain with `bad`."""
        self.given += points
        if condition:
            self.earned += points
            self.lines.append(f"  ✓ {good}")
            return True
        self.problems += 1
        self.lines.append(f"  ✗ {bad}")
        return False

    def fail(self, bad: str) -> None:
        """Stop here: say what is wrong; the remaining points are lost."""
        self.problems += 1
        self.lines.append(f"  ✗ {bad}")
        raise Abort(bad)

    def require(self, value: Any, what: str) -> Any:
        """`value`, or "尚未完成" if it is None / Ellipsis (the lab's placeholder)."""
        if value is None or value is Ellipsis:
            raise Pending(f"{what}还是空的（None）")
        return value

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the learner's function: NotImplementedError means "not done", other errors are named."""
        if fn is None or fn is Ellipsis:
            raise Pending("函数还没有写（收到的是 None）")
        if not callable(fn):
            self.fail(f"需要一个函数，收到的是 {type(fn).__name__}")
        try:
            return fn(*args, **kwargs)
        except NotImplementedError as exc:
            raise Pending(str(exc) or "函数里还是 raise NotImplementedError") from None
        except (Pending, Abort):
            raise
        except Exception as exc:  # the learner's code raised: name it, never a traceback wall
            name = getattr(fn, "__name__", "你的函数")
            self.fail(f"调用 {name}(…) 时抛出了 {_short(exc)}")


def stub_todo(fn: Any) -> str | None:
    """The TODO message when `fn` is a lab stub (still raises the labgen NotImplementedError), else None."""
    code = getattr(fn, "__code__", None)
    if code is None or "NotImplementedError" not in code.co_names:
        return None
    for const in code.co_consts:
        if isinstance(const, str) and const.startswith("TODO（第"):
            return const
    return None


_REGISTRY: dict[str, dict[str, Any]] = {}


def registry() -> dict[str, dict[str, Any]]:
    """{qid: {"function", "points", "title"}} of every check defined so far."""
    return dict(_REGISTRY)


def _record(result: Result) -> None:
    path = os.environ.get("BATCHLAB_SCORE_FILE")
    if not path:
        return
    row = {"qid": result.qid, "score": result.score, "max": result.max_score, "time": time.time()}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def check(qid: str, points: int, title: str) -> Callable[[Callable[..., None]], Callable[..., Result]]:
    """Make `fn(g, *answer)` a check that prints Chinese feedback and ``[score] qid s/points``."""
    if not QID_RE.match(qid):
        raise ValueError(f"check id must look like 'lab2.q1', not {qid!r}")
    if points < 1:
        raise ValueError(f"check {qid} must be worth at least 1 point")

    def decorate(fn: Callable[..., None]) -> Callable[..., Result]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Result:
            g = Grader(qid, points, title)
            pending = False
            answer = args[0] if args else None
            try:
                if answer is None or answer is Ellipsis:
                    raise Pending("还没有答案（收到的是 None）")
                stub = stub_todo(answer)
                if stub:
                    raise Pending(stub)
                fn(g, *args, **kwargs)
            except Pending as exc:
                pending = True
                g.earned = 0
                g.lines = [f"  · {exc}"]
            except NotImplementedError as exc:
                pending = True
                g.earned = 0
                g.lines = [f"  · {exc}"]
            except Abort:
                pass
            except Exception as exc:  # a wrong kind of answer the check did not foresee
                g.problems += 1
                g.lines.append(f"  ✗ 检查你的答案时出错：{_short(exc)}（答案的类型或形状对吗？）")
            if g.given > points:  # a bug in the check itself: never more than full marks
                raise AssertionError(f"check {qid} handed out {g.given} points, declared {points}")
            score = min(g.earned, points)
            head = f"第 {g.number} 题 · {title}："
            if pending:
                head = f"⏳ {head}尚未完成。写好上面的 TODO 再运行这一格。"
            elif score == points:
                head = f"✅ {head}全对！"
            else:
                head = f"❌ {head}还有 {max(g.problems, 1)} 处要改（看下面打 ✗ 的行）。"
            result = Result(qid, score, points, [head, *g.lines], pending)
            result.lines.append(result.score_line())
            print(result.text, flush=True)
            _record(result)
            return result

        run.qid = qid  # type: ignore[attr-defined]
        run.points = points  # type: ignore[attr-defined]
        _REGISTRY[qid] = {"function": run, "points": points, "title": title}
        return run

    return decorate


def parse_scores(text: str) -> dict[str, tuple[int, int]]:
    """{qid: (score, max)} from printed check output (the last line per qid wins)."""
    return {m.group("qid"): (int(m.group("score")), int(m.group("max"))) for m in SCORE_RE.finditer(text)}
