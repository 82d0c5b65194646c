"""`check` makes ``body(g, answer, ...)`` a lab check: Chinese feedback, a ``[score] labL.qN s/max`` line.

The body sees the answer only through its `Grader`, which records it as JSON evidence; under the
classroom grader (``BATCHLAB_GRADING=1``) the cell emits that evidence and the grader `replay`s it.
"""

from __future__ import annotations

import functools
import inspect
import json
import linecache
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tritonclient.utils import InferenceServerException

from batchlab.labs._evidence import EvidenceError, StandIn, from_evidence, to_evidence

SCORE_RE = re.compile(r"^\[score\] (?P<qid>\S+) (?P<score>\d+)/(?P<max>\d+)\s*$", re.M)
QID_RE = re.compile(r"^lab(?P<lab>\d+)\.q(?P<q>\d+)$")
EVIDENCE_MIME = "application/vnd.batchlab.evidence+json"
EVIDENCE_VERSION = 1
GRADING_ENV = "BATCHLAB_GRADING"

#: Text marks, not emoji (no emoji font needed).
MARK_OK, MARK_BAD, MARK_TODO, MARK_NOTE = "✓", "✗", "○", "·"


class Pending(Exception):
    """The answer is not written yet."""


class Abort(Exception):
    """A check that cannot go on (the rest of its points are lost)."""


class ReplayError(Exception):
    """Evidence that does not fit the check it claims to be from."""


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


@dataclass
class Raised:
    """What a learner's function raised: class name, message, the exception when it is an ISE, and
    where in the learner's own code it was raised (``where``: function, line, source; or None)."""

    type_name: str
    message: str
    exception: Any = None
    where: dict[str, Any] | None = None

    def short(self) -> str:
        """``TypeName: first line of the message``."""
        first = self.message.strip().splitlines()
        return f"{self.type_name}: {first[0] if first else ''}".rstrip(": ")

    def located(self) -> str:
        """`short`, with the learner's line when known: ``KeyError: 2（release 第 4 行：slot = slot_of[seq]）``."""
        w = self.where
        if not w:
            return self.short()
        return self.short() + f"（{w['function']} 第 {w['line']} 行" + (f"：{w['code']}）" if w["code"] else "）")


_LIBRARY_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), sys.prefix, sys.base_prefix)


def _learner_frame(exc: BaseException) -> dict[str, Any] | None:
    """The innermost frame of the traceback that is the learner's code (not the course library, the
    standard library or an installed package): its function, line and source line."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not os.path.abspath(code.co_filename).startswith(_LIBRARY_DIRS):
            line = linecache.getline(code.co_filename, tb.tb_lineno).strip()
            found = {"function": code.co_name, "line": tb.tb_lineno, "code": line[:120]}
        tb = tb.tb_next
    return found


def _short(exc: BaseException) -> str:
    return Raised(type(exc).__name__, str(exc)).short()


def is_callable(value: Any) -> bool:
    """`callable(value)`, also for the grader's stand-in of a learner's function."""
    return value._is_callable if isinstance(value, StandIn) else callable(value)


def _fn_name(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else "你的函数"


class _Tape:
    """The evidence records of one check run: written live, read back on replay."""

    def __init__(self, records: list[dict[str, Any]] | None = None) -> None:
        self.replaying = records is not None
        self.records: list[dict[str, Any]] = list(records) if records is not None else []
        self.pos = 0

    def next(self, kind: str) -> dict[str, Any]:
        if self.pos >= len(self.records):
            raise ReplayError("evidence ends before the check does")
        rec = self.records[self.pos]
        self.pos += 1
        if not isinstance(rec, dict) or rec.get("k") != kind:
            raise ReplayError(f"evidence record {self.pos} is not a {kind}")
        return rec


class Grader:
    """Collects feedback and points while a check runs; the one door to the learner's answer."""

    def __init__(self, qid: str, points: int, title: str, tape: _Tape | None = None,
                 shortcuts: dict[Any, str] | None = None) -> None:
        self.qid, self.points, self.title, self._shortcuts = qid, points, title, shortcuts or {}
        self.earned = self.given = self.problems = 0
        self.lines: list[str] = []
        self._tape = tape if tape is not None else _Tape()

    def note(self, text: str) -> None:
        """An informational line (no points)."""
        self.lines.append(f"  {MARK_NOTE} {text}")

    def expect(self, condition: Any, good: str, bad: str, points: int = 1) -> bool:
        """Award `points` if `condition` holds (and say `good`), else explain with `bad`."""
        self.given += points
        if condition:
            self.earned += points
            self.lines.append(f"  {MARK_OK} {good}")
            return True
        self.problems += 1
        self.lines.append(f"  {MARK_BAD} {bad}")
        return False

    def fail(self, bad: str) -> None:
        """Stop here: say what is wrong; the remaining points are lost."""
        self.expect(False, "", bad, points=0)
        raise Abort(bad)

    def number(self, value: Any, what: str) -> float:
        """`float(value)`, or fail saying that `what` should return a number (NaN is not one)."""
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{what}应该返回一个数，收到的是 {type(value).__name__}：{value!r}"[:300])
        if math.isnan(v):
            self.fail(f"{what}返回了 NaN")
        return v

    def require(self, value: Any, what: str) -> Any:
        """`value`, or "尚未完成" if it is None / Ellipsis (the lab's placeholder)."""
        if value is None or value is Ellipsis:
            raise Pending(f"{what}还是空的（None）")
        return value

    def call_raw(self, fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, Raised | None]:
        """(the learner's function's result, None) or (None, what it raised); the TODO stub raises Pending."""
        if fn is None or fn is Ellipsis:
            raise Pending("函数还没有写（收到的是 None）")
        if not is_callable(fn):
            self.fail(f"需要一个函数，收到的是 {type(fn).__name__}")
        if self._tape.replaying:
            rec = self._tape.next("call")
        else:
            rec = {"k": "call"}
            hits: list[str] = []
            try:
                result = _traced(self._shortcuts, hits, fn, args, kwargs)
                if inspect.isawaitable(result):  # an `async def`: never run, so say so (and close it)
                    getattr(result, "close", lambda: None)()
                    rec["async"] = True
                else:
                    rec["ok"] = to_evidence(result)
            except NotImplementedError as exc:
                rec["todo"] = str(exc)[:500]
            except Exception as exc:  # the learner's code raised: recorded, judged below
                rec["err"] = [type(exc).__name__, str(exc)[:2000],
                              to_evidence(exc) if isinstance(exc, InferenceServerException) else None,
                              _learner_frame(exc)]
            if hits:
                rec = {"k": "call", "shortcut": hits[0]}
            self._tape.records.append(rec)
        if "shortcut" in rec:
            name = str(rec["shortcut"]).rsplit(".", 1)[-1]
            self.fail(f"你的函数调用了课程库里现成的 {name}（{str(rec['shortcut'])[:80]}）："
                      "这一题要你自己写出来，只用题目给出的公式和数据")
        if "async" in rec:
            self.fail("你的函数是 async def，返回的是还没运行的协程：这一题要普通的 def 函数，直接返回结果")
        if "todo" in rec:
            raise Pending(str(rec["todo"]) or "函数里还是 raise NotImplementedError")
        if "err" in rec:
            name, message, ise, where = (list(rec["err"]) + [None, None, None, None])[:4]
            where = where if isinstance(where, dict) and {"function", "line", "code"} <= set(where) else None
            return None, Raised(str(name), str(message), from_evidence(ise) if ise is not None else None, where)
        if "ok" not in rec:
            raise ReplayError("call record without a result")
        return from_evidence(rec["ok"]), None

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the learner's function: NotImplementedError means "not done", other errors are named."""
        value, raised = self.call_raw(fn, *args, **kwargs)
        if raised is not None:
            self.fail(f"调用 {_fn_name(fn)}(…) 时抛出了 {raised.located()}")
        return value

    def observe(self, thunk: Callable[[], Any]) -> Any:
        """`thunk()` (the server, the clock), recorded so that the grader sees the same value."""
        if self._tape.replaying:
            rec = self._tape.next("obs")
        else:
            try:
                rec = {"k": "obs", "ok": to_evidence(thunk())}
            except Exception as exc:  # the server did not answer the check's own look-up
                rec = {"k": "obs", "err": _short(exc)[:500]}
            self._tape.records.append(rec)
        if "err" in rec:
            self.fail(f"检查格自己向服务器查询时出错：{rec['err']}（服务器还在运行吗？）")
        return from_evidence(rec.get("ok"))

    def clock(self) -> float:
        """time.perf_counter(), recorded."""
        return float(self.observe(time.perf_counter))


def _traced(shortcuts: dict[Any, str], hits: list[str], fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """`fn(*args, **kwargs)`, noting in `hits` any call (in this thread) to a shortcut's code."""
    if not shortcuts:
        return fn(*args, **kwargs)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in shortcuts and not hits:
            hits.append(shortcuts[frame.f_code])

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        return fn(*args, **kwargs)
    finally:
        sys.setprofile(previous)


def _shortcut_codes(functions: tuple) -> dict[Any, str]:
    plain = [getattr(f, "__func__", f) for f in functions]  # a method's function
    return {f.__code__: f"{f.__module__}.{f.__qualname__}" for f in plain}


def stub_todo(fn: Any) -> str | None:
    """The TODO message when `fn` is a lab stub (still raises the labgen NotImplementedError), else None."""
    code = getattr(fn, "__code__", None)
    if code is None or "NotImplementedError" not in code.co_names:
        return None
    return next((c for c in code.co_consts if isinstance(c, str) and c.startswith("TODO（第")), None)


_REGISTRY: dict[str, dict[str, Any]] = {}
_RESULTS: dict[str, Result] = {}
_CURRENT: list[int] = []


def registry() -> dict[str, dict[str, Any]]:
    """{qid: {"function", "points", "title"}} of every check defined so far."""
    return {qid: {k: v for k, v in info.items() if k != "body"} for qid, info in _REGISTRY.items()}


def last_result(lab: int, question: int) -> Result | None:
    """The last result of check ``lab{lab}.q{question}`` in this process, if any."""
    return _RESULTS.get(f"lab{lab}.q{question}")


def current_lab() -> int | None:
    """The lab whose check ran last in this process."""
    return _CURRENT[-1] if _CURRENT else None


def _body_args(args: tuple, kwargs: dict, enc_args: list, enc_kwargs: dict, live: bool) -> tuple[list, dict]:
    """The body judges recorded data; objects (functions, clients) stay live in the kernel."""
    def pick(real: Any, enc: Any) -> Any:
        if live and isinstance(enc, dict) and "__obj__" in enc:
            return real
        return from_evidence(enc)
    return ([pick(a, e) for a, e in zip(args, enc_args)] if live else [from_evidence(e) for e in enc_args],
            {k: pick(kwargs.get(k), e) for k, e in enc_kwargs.items()})


def _judge(qid: str, points: int, title: str, body: Callable[..., None], g: Grader,
           args: list, kwargs: dict, stub: str | None) -> Result:
    pending = False
    answer = args[0] if args else None
    try:
        if stub and stub.startswith(BLOCKED):
            g.fail(stub)
        if answer is None or answer is Ellipsis:
            raise Pending("还没有答案（收到的是 None）")
        if stub:
            raise Pending(stub)
        body(g, *args, **kwargs)
    except Pending as exc:
        pending = True
        g.earned = 0
        g.lines = [f"  {MARK_NOTE} {exc}"]
    except Abort:
        pass
    except (ReplayError, EvidenceError):
        raise
    except Exception as exc:  # a wrong kind of answer the check did not foresee
        g.expect(False, "", f"检查你的答案时出错：{_short(exc)}（答案的类型或形状对吗？）", points=0)
    if g.given > points:  # a bug in the check itself: never more than full marks
        raise AssertionError(f"check {qid} handed out {g.given} points, declared {points}")
    score = min(g.earned, points)
    head = f"第 {qid.rsplit('q', 1)[1]} 题 · {title}："
    if pending:
        head = f"{MARK_TODO} {head}尚未完成。写好上面的 TODO 再运行这一格。"
    elif score == points:
        head = f"{MARK_OK} {head}全对！"
    else:
        head = f"{MARK_BAD} {head}还有 {max(g.problems, 1)} 处要改（看下面打 {MARK_BAD} 的行）。"
    result = Result(qid, score, points, [head, *g.lines], pending)
    result.lines.append(result.score_line())
    return result


def _emit(evidence: dict[str, Any]) -> None:
    """Show the evidence as this cell's output (only under the classroom grader)."""
    from IPython.display import display  # reason: only inside a kernel (the grader's process never emits)
    display({EVIDENCE_MIME: evidence, "text/plain": f"<evidence {evidence['qid']}>"}, raw=True)


BLOCKED = "这一题要用到第 "


def _blocked(lab: int, after: tuple) -> str | None:
    """Why an answer is missing: an earlier question is not done or not right (None if neither)."""
    for q in after:
        r = _RESULTS.get(f"lab{lab}.q{q}")
        if r is not None and r.pending:
            return f"还没有答案：它要用第 {q} 题的函数算出来，先完成第 {q} 题"
        if r is not None and not r.passed:
            return f"{BLOCKED}{q} 题的结果（它是用第 {q} 题的函数算出来的），先把第 {q} 题改对，再从那里往下运行"
    return None


def check(qid: str, points: int, title: str, shortcuts: tuple = (),
          after: tuple = ()) -> Callable[[Callable[..., None]], Callable[..., Result]]:
    """A check of `body(g, *answer)`. `shortcuts`: course functions an answer may not call;
    `after`: earlier questions whose functions produce this answer (a missing one names them)."""
    codes = _shortcut_codes(tuple(shortcuts))
    m = QID_RE.match(qid)
    if not m:
        raise ValueError(f"check id must look like 'lab2.q1', not {qid!r}")
    if points < 1:
        raise ValueError(f"check {qid} must be worth at least 1 point")

    def decorate(body: Callable[..., None]) -> Callable[..., Result]:
        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> Result:
            enc_args = [to_evidence(a) for a in args]
            enc_kwargs = {k: to_evidence(v) for k, v in kwargs.items()}
            stub = stub_todo(args[0]) if args else None
            if after and (not args or args[0] is None):
                stub = _blocked(int(m.group("lab")), tuple(after)) or stub
            tape = _Tape()
            b_args, b_kwargs = _body_args(args, kwargs, enc_args, enc_kwargs, live=True)
            result = _judge(qid, points, title, body, Grader(qid, points, title, tape, codes), b_args, b_kwargs, stub)
            print(result.text, flush=True)
            _RESULTS[qid] = result
            _CURRENT.append(int(m.group("lab")))
            if os.environ.get(GRADING_ENV) == "1":
                _emit({"v": EVIDENCE_VERSION, "qid": qid, "args": enc_args, "kwargs": enc_kwargs,
                       "stub": stub, "records": tape.records, "time": time.time()})
            if os.environ.get("NBGRADER_EXECUTION"):  # nbgrader's autograde reads a number as partial credit
                return float(result.score)  # type: ignore[return-value]
            return result

        _REGISTRY[qid] = {"function": run, "points": points, "title": title, "body": body}
        return run

    return decorate


def replay(evidence: Any) -> Result:
    """Judge a check cell's evidence with this process's own checks; ReplayError when it does not fit."""
    if isinstance(evidence, (str, bytes)):
        try:
            evidence = json.loads(evidence)
        except ValueError:
            raise ReplayError("evidence is not JSON") from None
    if not isinstance(evidence, dict) or evidence.get("v") != EVIDENCE_VERSION:
        raise ReplayError("not batchlab evidence (or another version)")
    qid = evidence.get("qid")
    info = _REGISTRY.get(qid) if isinstance(qid, str) else None
    if info is None:
        raise ReplayError(f"no check called {qid!r}")
    try:
        enc_args = list(evidence.get("args") or [])
        enc_kwargs = dict(evidence.get("kwargs") or {})
        args, kwargs = _body_args((), {}, enc_args, enc_kwargs, live=False)
        records = list(evidence.get("records") or [])
    except (EvidenceError, TypeError, ValueError) as exc:
        raise ReplayError(f"bad evidence: {exc}") from None
    stub = evidence.get("stub")
    stub = stub if isinstance(stub, str) and stub.startswith(("TODO（第", BLOCKED, "还没有答案：")) else None
    if not set(kwargs) <= set(info["function"].__wrapped__.__code__.co_varnames):
        raise ReplayError("evidence names arguments the check does not have")
    tape = _Tape(records)
    try:
        result = _judge(qid, info["points"], info["title"], info["body"],
                        Grader(qid, info["points"], info["title"], tape), args, kwargs, stub)
    except EvidenceError as exc:
        raise ReplayError(f"bad evidence: {exc}") from None
    if tape.pos != len(tape.records):
        raise ReplayError(f"evidence has {len(tape.records) - tape.pos} records the check did not use")
    return result


def parse_scores(text: str) -> dict[str, tuple[int, int]]:
    """{qid: (score, max)} from printed check output (the last line per qid wins)."""
    return {m.group("qid"): (int(m.group("score")), int(m.group("max"))) for m in SCORE_RE.finditer(text)}
