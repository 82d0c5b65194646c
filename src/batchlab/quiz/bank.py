"""Question banks (quiz/*.json, format in quiz/README.md): `load_bank` validates a bank against
`bank.schema.json` and the rules a schema cannot state (`_semantics`), then `expand`s each question
with its derived fields. A problem is one `ValueError`: `FILE: ID: problem`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Iterator

import numpy as np

# jsonschema's optional "iri" format check imports rfc3987_syntax, which compiles a Lark grammar
# on import (seconds of CPU); a bank uses no formats, so that module is kept out of this import.
_BLOCK = "rfc3987_syntax" not in sys.modules
if _BLOCK:
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]
import jsonschema  # noqa: E402

if _BLOCK:
    del sys.modules["rfc3987_syntax"]

from batchlab._validate import count
from batchlab.paths import repo_root
from batchlab.quiz import params as P
from batchlab.quiz.safe_json import read_json_file

KINDS = {"single": "multiple_choice", "multi": "many_choice", "numeric": "numeric"}
"""Our question kinds and the jupyterquiz `type` each one maps to."""
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
UNSHUFFLED = frozenset({"interview"})
"""Banks whose options always keep the article's order (the interview bank is the article's)."""
_PREFIX = {("single", False): "不对。", ("multi", True): "这一项应选：", ("multi", False): "这一项不应选。"}
DEFAULT_FEEDBACK = {("single", False): "不对，再想想。", ("multi", True): "这一项应选。",
                    ("multi", False): "这一项不应选。", ("numeric", False): "不对，再算一遍。"}
"""Feedback of an option (or a wrong number) whose bank entry gives none."""
_KEY_ORDER = ("id", "kind", "type", "difficulty", "chapter", "see", "template", "params", "defaults",
              "formula", "question", "answers", "answer", "tolerance", "unit", "explanation",
              "erratum", "key_note", "numbers", "article_explanation")
_BANK_RE = re.compile(r"^(interview|ch(\d\d))$")


def quiz_dir() -> Path:
    """The folder holding the banks: `<repo>/quiz`."""
    return repo_root() / "quiz"


def list_banks() -> list[str]:
    """Names of the banks present: `interview` then `ch00` … `ch11` (other JSON is ignored)."""
    names = sorted(p.stem for p in quiz_dir().glob("*.json") if _BANK_RE.match(p.stem))
    return sorted(names, key=lambda n: (n != "interview", n))


def bank_path(bank: str | Path) -> Path:
    """The file of a bank given by name (`"ch02"`) or by path."""
    p = Path(bank)
    if p.suffix == ".json" or p.exists():
        return p
    p = quiz_dir() / f"{bank}.json"
    if not _BANK_RE.match(str(bank)) or not p.is_file():
        have = ", ".join(list_banks()) or "none"
        raise ValueError(f"unknown bank {str(bank)!r} (available: {have}; or give a .json path)")
    return p


@dataclass(frozen=True)
class Instance:
    """A question as one learner sees it: the stem with their parameters, the options in their
    order (displayed letter → text, and displayed letter → stable id) and the key."""

    stem: str
    options: dict[str, str]
    expected: Any
    explanation: str
    params: dict[str, Any] = field(default_factory=dict)
    option_ids: dict[str, str] = field(default_factory=dict)

    def letter_of(self, oid: str) -> str:
        """The displayed letter of option `oid` in this instance."""
        return next(k for k, i in self.option_ids.items() if i == oid)


@dataclass
class Question:
    """One validated question; `raw` is the expanded dict (stored plus derived fields)."""

    raw: dict[str, Any]
    bank: str

    id = property(lambda self: self.raw["id"])
    kind = property(lambda self: self.raw["kind"])
    difficulty = property(lambda self: self.raw["difficulty"])
    explanation = property(lambda self: self.raw["explanation"])
    erratum = property(lambda self: self.raw.get("erratum"))
    key_note = property(lambda self: self.raw.get("key_note"))
    unit = property(lambda self: self.raw.get("unit"))
    see = property(lambda self: list(self.raw.get("see", [])))

    @property
    def seeded(self) -> bool:
        """Whether the question's numbers are drawn per learner from a seed."""
        return "formula" in self.raw

    @property
    def shuffled(self) -> bool:
        """Whether a learner's seed reorders this question's options (chapter choice questions)."""
        return self.kind != "numeric" and self.bank not in UNSHUFFLED

    @property
    def options(self) -> dict[str, str]:
        """Article letter → option text, in file order (empty for numeric questions)."""
        return {} if self.kind == "numeric" else {
            LETTERS[i]: a["answer"] for i, a in enumerate(self.raw["answers"])}

    @property
    def option_ids(self) -> list[str]:
        """The stable option ids in file (article) order."""
        return [] if self.kind == "numeric" else [a["id"] for a in self.raw["answers"]]

    @property
    def key_ids(self) -> list[str]:
        """The ids of the correct options, in file order."""
        return [] if self.kind == "numeric" else [a["id"] for a in self.raw["answers"] if a["correct"]]

    def option(self, oid: str) -> dict[str, Any]:
        """The expanded option with id `oid` (KeyError if none)."""
        return {a.get("id"): a for a in self.raw["answers"]}[oid]

    def letter_of(self, oid: str) -> str:
        """The article letter of option `oid`."""
        return LETTERS[self.option_ids.index(oid)]

    def id_of_letter(self, letter: str) -> str:
        """The id of the option with article letter `letter`."""
        return self.option_ids[LETTERS.index(letter)]

    def option_order(self, seed: int | None, article_order: bool = False) -> list[str]:
        """Option ids in the order a learner with `seed` sees them: a seeded permutation for
        chapter choice questions; the article's order for the interview bank, with no seed or
        with `article_order`."""
        ids = self.option_ids
        if seed is None or article_order or not self.shuffled:
            return ids
        rng = np.random.default_rng([int(seed), P.qid_key("options:" + self.id)])
        return [ids[i] for i in rng.permutation(len(ids))]

    def expected(self, seed: int | None = None) -> Any:
        """The key in article terms: a letter, a sorted list of letters, or the number for this seed."""
        return self.instance(seed).expected if self.kind == "numeric" else self.raw["answer"]

    def expected_ids(self, seed: int | None = None) -> Any:
        """The key as stable ids: one id, a list of ids in file order, or the number."""
        if self.kind == "numeric":
            return self.instance(seed).expected
        return self.key_ids[0] if self.kind == "single" else self.key_ids

    def instance(self, seed: int | None = None, article_order: bool = False) -> Instance:
        """The question for one learner: stem, options in their order and the key (displayed
        letters), with parameters drawn from `seed`."""
        if self.seeded:
            values = P.draw_params(self.raw["params"], self.raw["defaults"], self.id, seed)
            value = P.formula(self.raw["formula"])(**values)
            return Instance(P.render_template(self.raw["template"], values), {}, value,
                            _explain(self.raw, values, value), values)
        if self.kind == "numeric":
            return Instance(self.raw["question"], {}, float(self.raw["answer"]), self.explanation)
        shown = {LETTERS[i]: oid for i, oid in enumerate(self.option_order(seed, article_order))}
        back = {oid: k for k, oid in shown.items()}
        keys = sorted(back[oid] for oid in self.key_ids)
        return Instance(self.raw["question"], {k: self.option(oid)["answer"] for k, oid in shown.items()},
                        keys[0] if self.kind == "single" else keys, self.explanation, {}, shown)

    def tolerance(self, expected: float) -> float:
        """The absolute tolerance around `expected` (from `{"abs": x}` or `{"rel": r}`)."""
        tol = self.raw["tolerance"]
        return float(tol["abs"]) if "abs" in tol else abs(expected) * float(tol["rel"])

    def tolerance_text(self) -> str:
        """The tolerance as stated to learners, e.g. `±1%` or `±0.5`."""
        tol = self.raw["tolerance"]
        return f"±{P.fmt_value(tol['abs'])}" if "abs" in tol else f"±{P.fmt_value(tol['rel'] * 100)}%"

    def is_close(self, given: float, expected: float) -> bool:
        """Whether a numeric answer is within the stated tolerance (bounds included)."""
        return abs(given - expected) <= self.tolerance(expected) * (1 + 1e-12) + 1e-12


@dataclass
class Bank:
    """A loaded, validated bank: its name, file and questions in file order."""

    name: str
    path: Path
    questions: list[Question]

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)

    def __len__(self) -> int:
        return len(self.questions)

    def __getitem__(self, qid: str) -> Question:
        return {q.id: q for q in self.questions}[qid]

    def __contains__(self, qid: object) -> bool:
        return qid in self.ids

    @property
    def ids(self) -> list[str]:
        return [q.id for q in self.questions]

    def pick(self, n: int | None, seed: int | None) -> list[str]:
        """The ids a quiz of `n` questions shows (bank order): all when `n` is None or covers the
        bank, the first `n` without a seed, else `n` drawn by the seed (the grader redraws it)."""
        ids = self.ids
        if n is None or n >= len(ids):
            return ids
        count("n", n)
        if seed is None:
            return ids[:n]
        keep = set(np.random.default_rng(seed).choice(len(ids), size=n, replace=False).tolist())
        return [qid for i, qid in enumerate(ids) if i in keep]

    def to_jupyterquiz(self) -> list[dict[str, Any]]:
        """The questions for `jupyterquiz.display_quiz` (its format plus our keys)."""
        return [dict(q.raw) for q in self.questions]


def _explain(q: dict[str, Any], values: dict[str, Any], value: float) -> str:
    """A seeded question's explanation with the learner's parameters and answer filled in."""
    return P.render_template(q["explanation"], {**values, "answer": P.fmt_number(value)})


def right_feedback(q: dict[str, Any]) -> str:
    """Feedback of the key of a single-choice or numeric question: `正确。` + explanation
    (seeded: with the default parameters) + any 勘误."""
    expl = q["explanation"]
    if "formula" in q:
        expl = _explain(q, q["defaults"], P.formula(q["formula"])(**q["defaults"]))
    return "正确。" + expl + (f"\n\n勘误：{q['erratum']}" if q.get("erratum") else "")


def _feedback(kind: str, a: dict[str, Any]) -> str:
    rest = (f"误解：{a['misconception']}。" if "misconception" in a else "") + a.get("feedback", "")
    return _PREFIX[kind, a["correct"]] + rest if rest else DEFAULT_FEEDBACK[kind, a["correct"]]


def expand(q: dict[str, Any]) -> dict[str, Any]:
    """A stored (validated) question with its derived fields: `type`, `answer` (article letters,
    or a seeded question's default value), each option's `feedback`, a numeric `answers` range
    and a seeded question's default `question`."""
    out = {**q, "type": KINDS[q["kind"]]}
    if q["kind"] == "numeric":
        if "formula" in q:
            out["question"] = P.render_template(q["template"], q["defaults"])
            out["answer"] = float(f"{P.formula(q['formula'])(**q['defaults']):.10g}")
        value = float(out["answer"])
        tol = Question(out, "").tolerance(value)
        out["answers"] = [
            {"type": "range", "range": [float(f"{value - tol:.10g}"), float(f"{value + tol:.10g}")],
             "correct": True, "feedback": right_feedback(q)},
            {"type": "default", "feedback": DEFAULT_FEEDBACK["numeric", False]}]
    else:
        out["answers"] = [{**a, "feedback": right_feedback(q) if q["kind"] == "single" and a["correct"]
                           else _feedback(q["kind"], a)} for a in q["answers"]]
        key = [LETTERS[i] for i, a in enumerate(q["answers"]) if a["correct"]]
        out["answer"] = key[0] if q["kind"] == "single" else key
    return {k: out[k] for k in _KEY_ORDER if k in out}


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((Path(__file__).parent / "bank.schema.json").read_text("utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _schema_problem(data: Any) -> tuple[int | None, str] | None:
    """The first schema violation: (question index or None, one-line message)."""
    err = jsonschema.exceptions.best_match(_validator().iter_errors(data))
    if err is None:
        return None
    path = list(err.absolute_path)
    msg = err.message.splitlines()[0][:160]
    if err.validator is None:  # a `false` subschema: a key this kind of question must not store
        key = next((k for k, v in data[path[0]].items() if v is err.instance), "?")
        msg = f"{key!r} is not stored for this kind of question (derived, or for another kind)"
    at = "/".join(str(p) for p in path[1:])
    return (path[0] if path else None), (f"{at}: {msg}" if at else msg)


def _seeded_problems(q: dict[str, Any]) -> str | None:
    if q["formula"] not in P.FORMULAS:
        return f"unknown formula {q['formula']!r} (known: {', '.join(sorted(P.FORMULAS))})"
    f, params, defaults = P.formula(q["formula"]), q["params"], q["defaults"]
    if set(params) != set(f.param_names):
        return f"formula {f.name!r} takes {list(f.param_names)} but 'params' gives {list(params)}"
    if set(defaults) != set(params) or any(v not in params[k] for k, v in defaults.items()):
        return "'defaults' must give each parameter one of its choices"
    if set(P.placeholders(q["template"])) != set(params):
        return f"template placeholders {sorted(set(P.placeholders(q['template'])))} are not {sorted(params)}"
    if set(P.placeholders(q["explanation"])) - set(params) - {"answer"}:
        return "explanation placeholders are neither parameters nor answer"
    if math.prod(len(c) for c in params.values()) > 20000:
        return "more than 20000 parameter combinations"
    for combo in itertools.product(*params.values()):
        values = dict(zip(params, combo))
        try:
            if not math.isfinite(f(**values)):
                return f"formula is not finite for {values}"
        except (ValueError, ZeroDivisionError, TypeError) as e:
            return f"formula fails for {values}: {e}"
    return None


def _semantics(q: dict[str, Any], bank: str) -> str | None:
    """What the schema cannot state: the question's bank, the key, distinct options,
    misconceptions on distractors, and a seeded question's formula on every draw."""
    m = _BANK_RE.match(bank)
    if m and m.group(2) and not (q["id"].startswith(f"ch{m.group(2)}-") and q["chapter"] == m.group(2)):
        return f"id and chapter must belong to bank {bank!r}"
    if "formula" not in q and P.placeholders(q["explanation"]):
        return "only seeded questions may use {{…}} placeholders in 'explanation'"
    if q["kind"] == "numeric":
        return _seeded_problems(q) if "formula" in q else (
            None if math.isfinite(q["answer"]) else "a numeric 'answer' must be finite")
    opts = q["answers"]
    for key in ("id", "answer"):
        seen = [a[key].strip() for a in opts]
        if len(set(seen)) != len(seen):
            return f"option {key}s are not unique"
    n = sum(a["correct"] for a in opts)
    if (q["kind"] == "single" and n != 1) or n < 1:
        return f"a {q['kind']}-choice question has {n} correct options"
    for a in opts:
        if q["kind"] == "single" and a["correct"] and "feedback" in a:
            return f"option {a['id']!r}: the key's feedback is 正确。+ explanation, not stored"
        if a["correct"] and "misconception" in a:
            return f"option {a['id']!r} is correct but names a misconception"
        if bank not in UNSHUFFLED and not a["correct"] and "misconception" not in a:
            return f"distractor {a['id']!r} must name the 'misconception' it stands for"
    return None


def parse_bank(data: Any, name: str, where: str) -> list[Question]:
    """Validate stored bank data and expand it; ValueError naming file, id and problem."""
    found = _schema_problem(data)
    if found:
        i, msg = found
        q = data[i] if i is not None else None
        label = q.get("id") if isinstance(q, dict) and isinstance(q.get("id"), str) else (
            f"question #{i + 1}" if i is not None else "bank")
        raise ValueError(f"{where}: {label}: {msg}")
    seen: set[str] = set()
    for q in data:
        problem = "duplicate id" if q["id"] in seen else _semantics(q, name)
        if problem:
            raise ValueError(f"{where}: {q['id']}: {problem}")
        seen.add(q["id"])
    if name == "interview" and [q["id"] for q in data] != [f"Q{i}" for i in range(1, len(data) + 1)]:
        raise ValueError(f"{where}: interview ids must be Q1…Q{len(data)} in order")
    return [Question(expand(q), name) for q in data]


def _read(path: Path) -> Any:
    try:
        return read_json_file(path, max_bytes=4 << 20, max_depth=16)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def load_bank(bank: str | Path) -> Bank:
    """Load and validate a bank by name (`"interview"`, `"ch02"`) or path."""
    path = bank_path(bank)
    return Bank(path.stem, path, parse_bank(_read(path), path.stem, str(path)))


def load_all() -> dict[str, Bank]:
    """Every bank in the quiz folder, validated; ids must be unique across banks."""
    banks = {n: load_bank(quiz_dir() / f"{n}.json") for n in list_banks()}
    owner: dict[str, str] = {}
    for name, b in banks.items():
        for qid in b.ids:
            if owner.setdefault(qid, name) != name:
                raise ValueError(f"{b.path}: {qid}: id also used in bank {owner[qid]!r}")
    return banks


def sync_file(path: str | Path) -> int:
    """Validate a bank file and rewrite it in canonical form (key order, two-space indent);
    returns the number of questions."""
    data = _read(path := Path(path))
    parse_bank(data, path.stem, str(path))
    data = [{k: q[k] for k in _KEY_ORDER if k in q} for q in data]
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return len(data)
