"""Item-writing checks on the banks; `audit(banks)` runs them all (empty: the banks pass): keys
spread over positions, options of similar length, blind strategies no better than chance, no option
named by letter in a shuffled question, every quoted number sourced.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
import unicodedata
from typing import Any, Callable, Mapping

import numpy as np

from batchlab.quiz import params as P
from batchlab.quiz.bank import LETTERS, Bank, Question

MAX_KEY_SHARE = 0.35
"""Most single-choice keys one option position may hold, over the chapter banks."""

MAX_WIDTH_RATIO = 1.5
"""Longest option ÷ shortest option within a question (display width)."""


@functools.lru_cache(maxsize=4096)  # the banks' option texts, measured again for every shuffle
def display_width(text: str) -> int:
    """Display width: East Asian wide and fullwidth characters count 2, others 1."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _choice_questions(banks: Mapping[str, Bank]) -> list[Question]:
    return [q for b in banks.values() if b.name != "interview" for q in b if q.kind != "numeric"]


def key_positions(banks: Mapping[str, Bank]) -> dict[str, float]:
    """Share of the chapter banks' single-choice keys at each article position A, B, C…"""
    keys = [q.raw["answer"] for q in _choice_questions(banks) if q.kind == "single"]
    if not keys:
        return {}
    top = max(LETTERS.index(k) for k in keys) + 1
    return {LETTERS[i]: keys.count(LETTERS[i]) / len(keys) for i in range(top)}


def length_problems(q: Question) -> list[str]:
    """Options whose lengths differ too much within the question."""
    w = [display_width(text) for text in q.options.values()] or [0]
    if max(w) > MAX_WIDTH_RATIO * min(w):
        return [f"{q.id}: options range from width {min(w)} to {max(w)} (> {MAX_WIDTH_RATIO}×)"]
    return []


_LETTER_REF = re.compile(
    r"(?:^|(?<=[。；：\s]))[A-E](?:[、，][A-E])*。"        # "A。" opening an explanation
    r"|(?<![A-Za-z0-9_(/·.])[A-E](?:[、和与][A-E])*\s?(?:都|也)?(?:错|对|项|不对|不是|说的|选项)"
    r"|（[A-E](?:[、，][A-E])*）|选\s?[A-E](?![A-Za-z0-9_(])")


def letter_references(q: Question) -> list[str]:
    """Explanation/erratum text of a shuffled question that names options by letter."""
    if not q.shuffled:
        return []
    out = []
    for field_name in ("explanation", "erratum"):
        m = _LETTER_REF.search(re.sub(r"`[^`]*`", "", q.raw.get(field_name) or ""))
        if m:
            out.append(f"{q.id}: {field_name} names an option by letter ({m.group()!r}); options "
                       "are shuffled per learner: name it by its content")
    return out


def chance(q: Question) -> float:
    """Expected score of a uniform random guess: 1/k for single choice, 1/(2^k − 1) for a
    multi-select graded all-or-nothing (a random non-empty subset)."""
    k = len(q.option_ids)
    return 1.0 / k if q.kind == "single" else 1.0 / (2**k - 1)


def _longest(q: Question, order: list[str]) -> list[str]:
    w = {oid: display_width(q.option(oid)["answer"]) for oid in order}
    top = max(w.values())
    return [oid for oid in order if w[oid] == top]


STRATEGIES: dict[str, Callable[[Question, list[str]], float]] = {
    "always-first": lambda q, order: float([order[0]] == q.key_ids),
    "always-longest": lambda q, order: float(np.mean([[oid] == q.key_ids for oid in _longest(q, order)])),
    "all-of-the-above": lambda q, order: float(set(order) == set(q.key_ids)),
}
"""Blind strategies: the expected score on one question with options shown in `order`."""


def blind_scores(banks: Mapping[str, Bank], seed: int | None = None) -> dict[str, dict[str, float]]:
    """Expected score of each blind strategy (`s`, with `s:chance` and `s:n` of the questions it
    plays) and of chance, per chapter bank and `"all"`, options in article order or `seed`'s.
    "all-of-the-above" plays the multi-selects only."""
    out: dict[str, dict[str, float]] = {}
    groups: dict[str, list[Question]] = {}
    for q in _choice_questions(banks):
        groups.setdefault(q.bank, []).append(q)
    groups["all"] = [q for qs in list(groups.values()) for q in qs]
    orders = {id(q): q.option_order(seed) for q in groups["all"]}  # each question's order, drawn once
    for name, qs in groups.items():
        row: dict[str, float] = {"n": float(len(qs)), "chance": float(np.mean([chance(q) for q in qs]))}
        for sname, strat in STRATEGIES.items():
            pool = [q for q in qs if q.kind == "multi"] if sname == "all-of-the-above" else qs
            if not pool:
                continue
            row[sname] = float(np.mean([strat(q, orders[id(q)]) for q in pool]))
            row[f"{sname}:chance"] = float(np.mean([chance(q) for q in pool]))
            row[f"{sname}:n"] = float(len(pool))
        out[name] = row
    return out


_NUMBER = re.compile(r"(?<![A-Za-z0-9_#'’.\-/^])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![0-9])(?![A-Za-z_])")
_FREE = {"0", "1", "2"}


def quoted_numbers(text: str) -> list[str]:
    """The numbers quoted in prose, as written (placeholders, chapter references, `2^30`,
    identifiers such as `fp16`, `#4667`, `Llama-3-8B` are not numbers)."""
    text = P._PLACEHOLDER.sub(" ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"第\s*\d+(?:\s*[、，,和]\s*\d+)*\s*章|\d+(?:\.\d+)+\s*节|2\^\d+|(?:OSDI|SOSP|NSDI|MLSys)\s*[’']\d\d"
                  r"|arXiv[:：]\s*\d+\.\d+", " ", text)
    return [m.group(1) + (m.group(2) or "") for m in _NUMBER.finditer(text)]


_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Pow: operator.pow, ast.FloorDiv: operator.floordiv, ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS: dict[str, Callable[..., Any]] = {"ceil": math.ceil, "floor": math.floor, "min": min,
                                         "max": max, "round": round, "log2": math.log2,
                                         "sqrt": math.sqrt, "sum": sum, "len": len}


def eval_expr(expr: str) -> float:
    """Evaluate an arithmetic expression that may call the quiz formulas by keyword
    (`ridge(tflops=989, tbs=3.35)`), `ceil`, `floor`, `min`, `max`, `round`, `sum`, `len`;
    nothing else is allowed."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            args = [ev(a) for a in node.args]
            kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg}
            if name in P.FORMULAS:
                if args:
                    raise ValueError(f"call {name} with keyword arguments")
                return P.formula(name)(**kwargs)
            if name in _FUNCS:
                return _FUNCS[name](*args, **kwargs)
            raise ValueError(f"unknown function {name!r}")
        raise ValueError(f"not allowed in an expression: {ast.dump(node)[:60]}")

    return float(ev(ast.parse(expr, mode="eval").body))


def _agrees(written: str, value: float) -> bool:
    x = float(written.replace(",", ""))
    decimals = len(written.split(".")[1]) if "." in written else 0
    return abs(value - x) <= 0.5 * 10 ** (-decimals) * (1 + 1e-9) + 1e-12


def _prose(q: Question) -> list[tuple[str, str]]:
    parts = [(k, q.raw.get(k) or "") for k in ("explanation", "erratum", "key_note")]
    if q.kind == "numeric":
        return parts + [("feedback", q.raw["answers"][1]["feedback"])]
    return parts + [(f"feedback of {a['id']}", a["feedback"]) for a in q.raw["answers"]
                    if not a["correct"] or q.kind == "multi"]


def number_problems(q: Question) -> list[str]:
    """Quoted numbers that are neither given in the question nor justified by `numbers`, and
    `numbers` entries whose expression does not give the number written."""
    given = set(quoted_numbers(" ".join([q.raw["question"], *q.options.values()])))
    if q.seeded:
        for choices in q.raw["params"].values():
            given |= {P.fmt_value(c) for c in choices}
            given |= set(quoted_numbers(" ".join(P.fmt_value(c) for c in choices)))
    just = q.raw.get("numbers", {})
    out = []
    for k, v in just.items():
        if "expr" in v:
            try:
                value = eval_expr(v["expr"])
            except (ValueError, ZeroDivisionError, TypeError, SyntaxError) as e:
                out.append(f"{q.id}: numbers[{k!r}]: cannot evaluate {v['expr']!r}: {e}")
                continue
            if not _agrees(k, value):
                out.append(f"{q.id}: numbers[{k!r}] = {v['expr']} gives {value:.6g}, not {k}")
    seen = set()
    for where, text in _prose(q):
        for num in quoted_numbers(text):
            if num in _FREE or num in given or num in just:
                seen.add(num)
                continue
            out.append(f"{q.id}: {where} quotes {num} with no source or expression in 'numbers'")
    out += [f"{q.id}: numbers[{k!r}] is not quoted anywhere" for k in sorted(set(just) - seen - given)]
    return out


def audit(banks: Mapping[str, Bank], margin: float = 0.10) -> list[str]:
    """Every problem the checks above find in `banks` (chapter-bank rules skip the interview
    bank, whose options and keys are the article's)."""
    out: list[str] = []
    chapter = [q for b in banks.values() if b.name != "interview" for q in b]
    for q in chapter:
        out += length_problems(q) + letter_references(q)
    for q in (q for b in banks.values() for q in b):
        out += number_problems(q)
    shares = key_positions(banks)
    for letter, share in shares.items():
        if share > MAX_KEY_SHARE:
            out.append(f"{share:.0%} of the single-choice keys are at position {letter} "
                       f"(limit {MAX_KEY_SHARE:.0%})")
    multis = [q for q in chapter if q.kind == "multi"]
    if multis:
        if all(q.option_ids[0] in q.key_ids for q in multis):
            out.append("every multi-select keys its first option")
        if len({len(q.key_ids) for q in multis}) < 2:
            out.append("every multi-select has the same number of keys")
    scores = blind_scores(banks)
    for name, row in scores.items():
        for sname in (s for s in STRATEGIES if s in row):
            base = row[f"{sname}:chance"]
            limit = base + (margin if name == "all" else max(margin, 1.0 / row[f"{sname}:n"]))
            if row[sname] > limit + 1e-9:
                out.append(f"{name}: {sname} scores {row[sname]:.0%} against chance {base:.0%}")
    return out

