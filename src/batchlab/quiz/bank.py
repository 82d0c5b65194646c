"""Question banks: loading, schema validation, and the jupyterquiz fields derived from ours.

A bank is a JSON array of question objects (see quiz/README.md). Each question carries our
fields (`id`, `kind`, `answer`, `explanation`, `difficulty`, `chapter`, …) and jupyterquiz's
(`question`, `type`, `answers` with `answer`/`correct`/`feedback`), so the same file can be
passed to `jupyterquiz.display_quiz`. Options are the `answers[].answer` texts; each has a
stable `id` (what submissions record) and an article letter A, B, C… in file order (the order
`--article-order` shows). Chapter banks present their options in a per-learner seeded order
(`Question.option_order`); the interview bank keeps the article's order. Everything is validated
on load; a problem raises a `ValueError` naming the file, the question id and the problem.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from batchlab.paths import repo_root
from batchlab.quiz import params as P
from batchlab.quiz.safe_json import read_json_file

__all__ = [
    "Bank",
    "Instance",
    "Question",
    "bank_path",
    "derive_fields",
    "parse_bank",
    "right_feedback",
    "list_banks",
    "load_bank",
    "load_all",
    "quiz_dir",
    "read_json",
    "sync_file",
]

KINDS = {"single": "multiple_choice", "multi": "many_choice", "numeric": "numeric"}
"""Our question kinds and the jupyterquiz `type` each one maps to."""

DIFFICULTIES = ("easy", "mid", "hard", "extreme")
CHAPTERS = tuple(f"{i:02d}" for i in range(11))
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

_REQUIRED = ("id", "kind", "type", "difficulty", "chapter", "question", "answers", "answer",
             "explanation")
_OPTIONAL = ("see", "tolerance", "unit", "formula", "params", "defaults", "template",
             "erratum", "article_explanation", "key_note", "numbers")
_KEY_ORDER = ("id", "kind", "type", "difficulty", "chapter", "see", "template", "params",
              "defaults", "formula", "question", "answers", "answer", "tolerance", "unit",
              "explanation", "erratum", "key_note", "numbers", "article_explanation")
_OPTION_KEYS = ("id", "answer", "correct", "misconception", "feedback")
OPTION_ID = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
"""Stable option ids: lowercase words joined by '-', 2–24 characters (never a bare letter)."""
UNSHUFFLED = frozenset({"interview"})
"""Banks whose options always keep the article's order (the interview bank is the article's)."""
_SEEDED = ("formula", "params", "defaults", "template")

FEEDBACK = {
    "single_wrong": "不对，再想想。",
    "multi_right": "这一项应选。",
    "multi_wrong": "这一项不应选。",
    "numeric_wrong": "不对，再算一遍。",
}
_WRONG_PREFIX = {"single": "不对。", "multi": "这一项不应选。"}
"""Default jupyterquiz feedback texts that `sync` writes where a bank has none."""

_BANK_RE = re.compile(r"^(interview|ch(\d\d))$")


def quiz_dir() -> Path:
    """The folder holding the banks: `<repo>/quiz`."""
    return repo_root() / "quiz"


def list_banks(folder: Path | None = None) -> list[str]:
    """Names of the banks present: `interview` then `ch00` … `ch10` (other JSON is ignored)."""
    folder = folder or quiz_dir()
    names = sorted(p.stem for p in folder.glob("*.json") if _BANK_RE.match(p.stem))
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

    qid: str
    kind: str
    stem: str
    options: dict[str, str]
    expected: Any
    explanation: str
    params: dict[str, Any] = field(default_factory=dict)
    option_ids: dict[str, str] = field(default_factory=dict)

    def letter_of(self, oid: str) -> str:
        """The displayed letter of option `oid` in this instance."""
        for letter, i in self.option_ids.items():
            if i == oid:
                return letter
        raise KeyError(oid)


def _option_seed(qid: str) -> int:
    return P.qid_key("options:" + qid)


@dataclass
class Question:
    """One validated question. `raw` is the dict as stored in the bank file."""

    raw: dict[str, Any]
    bank: str

    @property
    def id(self) -> str:
        return self.raw["id"]

    @property
    def kind(self) -> str:
        return self.raw["kind"]

    @property
    def difficulty(self) -> str:
        return self.raw["difficulty"]

    @property
    def chapter(self) -> str:
        return self.raw["chapter"]

    @property
    def explanation(self) -> str:
        """The explanation as stored (seeded questions: with `{{param}}`/`{{answer}}` slots)."""
        return self.raw["explanation"]

    @property
    def erratum(self) -> str | None:
        return self.raw.get("erratum")

    @property
    def key_note(self) -> str | None:
        return self.raw.get("key_note")

    @property
    def see(self) -> list[str]:
        return list(self.raw.get("see", []))

    @property
    def unit(self) -> str | None:
        return self.raw.get("unit")

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
        if self.kind == "numeric":
            return {}
        return {LETTERS[i]: a["answer"] for i, a in enumerate(self.raw["answers"])}

    @property
    def option_ids(self) -> list[str]:
        """The stable option ids in file (article) order."""
        if self.kind == "numeric":
            return []
        return [a["id"] for a in self.raw["answers"]]

    def option(self, oid: str) -> dict[str, Any]:
        """The stored option with id `oid` (KeyError if none)."""
        for a in self.raw.get("answers", []):
            if a.get("id") == oid:
                return a
        raise KeyError(oid)

    def letter_of(self, oid: str) -> str:
        """The article letter of option `oid`."""
        return LETTERS[self.option_ids.index(oid)]

    def id_of_letter(self, letter: str) -> str:
        """The id of the option with article letter `letter`."""
        return self.option_ids[LETTERS.index(letter)]

    @property
    def key_ids(self) -> list[str]:
        """The ids of the correct options, in file order."""
        return [a["id"] for a in self.raw.get("answers", []) if a.get("correct") is True
                and self.kind != "numeric"]

    def option_order(self, seed: int | None, article_order: bool = False) -> list[str]:
        """Option ids in the order a learner with `seed` sees them: a seeded permutation for
        chapter choice questions, the article's order for the interview bank, with no seed or
        with `article_order`."""
        ids = self.option_ids
        if seed is None or article_order or not self.shuffled:
            return ids
        rng = np.random.default_rng([int(seed), _option_seed(self.id)])
        return [ids[i] for i in rng.permutation(len(ids))]

    def expected(self, seed: int | None = None) -> Any:
        """The key in article terms: a letter, a sorted list of letters, or the number for this
        seed."""
        if self.kind == "numeric":
            return self.instance(seed).expected
        ans = self.raw["answer"]
        return sorted(ans) if self.kind == "multi" else ans

    def expected_ids(self, seed: int | None = None) -> Any:
        """The key as stable ids: one id, a list of ids in file order, or the number."""
        if self.kind == "numeric":
            return self.instance(seed).expected
        return self.key_ids[0] if self.kind == "single" else self.key_ids

    def instance(self, seed: int | None = None, article_order: bool = False) -> Instance:
        """The question for one learner: stem, options in their order and the key (displayed
        letters), with parameters drawn from `seed`."""
        if not self.seeded:
            if self.kind == "numeric":
                return Instance(self.id, self.kind, self.raw["question"], {},
                                float(self.raw["answer"]), self.explanation)
            order = self.option_order(seed, article_order)
            shown = {LETTERS[i]: oid for i, oid in enumerate(order)}
            texts = {k: self.option(oid)["answer"] for k, oid in shown.items()}
            back = {oid: k for k, oid in shown.items()}
            keys = sorted(back[oid] for oid in self.key_ids)
            ans: Any = keys[0] if self.kind == "single" else keys
            return Instance(self.id, self.kind, self.raw["question"], texts, ans,
                            self.explanation, {}, shown)
        values = P.draw_params(self.raw["params"], self.raw["defaults"], self.id, seed)
        stem = P.render_template(self.raw["template"], values)
        value = P.formula(self.raw["formula"])(**values)
        return Instance(self.id, self.kind, stem, {}, value,
                        _render_explanation(self.raw, values, value), values)

    def tolerance(self, expected: float) -> float:
        """The absolute tolerance around `expected` (from `{"abs": x}` or `{"rel": r}`)."""
        tol = self.raw["tolerance"]
        if "abs" in tol:
            return float(tol["abs"])
        return abs(expected) * float(tol["rel"])

    def tolerance_text(self) -> str:
        """The tolerance as stated to learners, e.g. `±1%` or `±0.5`."""
        tol = self.raw["tolerance"]
        if "abs" in tol:
            return f"±{P.fmt_value(tol['abs'])}"
        return f"±{P.fmt_value(tol['rel'] * 100)}%"

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
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(qid)

    def __contains__(self, qid: object) -> bool:
        return any(q.id == qid for q in self.questions)

    @property
    def ids(self) -> list[str]:
        return [q.id for q in self.questions]

    def pick(self, n: int | None, seed: int | None) -> list[str]:
        """The ids a quiz of `n` questions shows (bank order): all of them when `n` is None or
        covers the bank, the first `n` without a seed, else `n` drawn by the seed. The grader
        recomputes this draw to check a learner's `_shown`."""
        ids = self.ids
        if n is None or n >= len(ids):
            return ids
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a whole number ≥ 1, got {n!r}")
        if seed is None:
            return ids[:n]
        rng = np.random.default_rng(seed)
        keep = set(rng.choice(len(ids), size=n, replace=False).tolist())
        return [qid for i, qid in enumerate(ids) if i in keep]

    def to_jupyterquiz(self) -> list[dict[str, Any]]:
        """The questions as plain dicts, ready for `jupyterquiz.display_quiz` (extra keys kept)."""
        return [dict(q.raw) for q in self.questions]


# --- validation -----------------------------------------------------------------------------


class _Problem(ValueError):
    pass


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _nonempty_str(q: dict, key: str) -> None:
    if not isinstance(q.get(key), str) or not q[key].strip():
        raise _Problem(f"'{key}' must be a non-empty string")


def _check_options(q: dict, bank: str) -> None:
    """Option ids, and for chapter banks the misconception each distractor stands for."""
    chapter_bank = bank not in UNSHUFFLED
    ids = []
    for i, a in enumerate(q["answers"]):
        oid = a.get("id")
        if not isinstance(oid, str) or not OPTION_ID.match(oid) or not 2 <= len(oid) <= 24:
            raise _Problem(f"option {LETTERS[i]} needs an 'id': 2–24 lowercase letters/digits "
                           "joined by '-', e.g. \"toplevel\"")
        ids.append(oid)
        wrong = not a["correct"]
        m = a.get("misconception")
        if m is not None and (not isinstance(m, str) or not m.strip()):
            raise _Problem(f"option {LETTERS[i]}: 'misconception' must be a non-empty string")
        if m is not None and a["correct"]:
            raise _Problem(f"option {LETTERS[i]} is correct but names a misconception")
        if chapter_bank and wrong:
            if m is None:
                raise _Problem(f"option {LETTERS[i]} is a distractor: name the 'misconception' "
                               "it stands for")
            prefix = _WRONG_PREFIX[q["kind"]]
            if not a["feedback"].startswith(prefix) or m not in a["feedback"]:
                raise _Problem(f"feedback of option {LETTERS[i]} must start with {prefix!r} and "
                               "name its misconception")
        if chapter_bank and q["kind"] == "multi" and a["correct"] and (
                not a["feedback"].startswith("这一项应选") or a["feedback"] == FEEDBACK["multi_right"]):
            raise _Problem(f"feedback of option {LETTERS[i]} must say why it is right "
                           "(\"这一项应选：…\")")
    dup = [x for x in set(ids) if ids.count(x) > 1]
    if dup:
        raise _Problem(f"option id {dup[0]!r} appears twice")


def _check_choices(q: dict, bank: str = "") -> list[str]:
    answers = q["answers"]
    if not isinstance(answers, list) or len(answers) < 2:
        raise _Problem("'answers' must list at least 2 options")
    if len(answers) > len(LETTERS):
        raise _Problem("too many options")
    texts = []
    for i, a in enumerate(answers):
        if not isinstance(a, dict):
            raise _Problem(f"option {LETTERS[i]} must be an object")
        extra = set(a) - set(_OPTION_KEYS)
        if extra:
            raise _Problem(f"option {LETTERS[i]} has unknown keys {sorted(extra)}")
        if not isinstance(a.get("answer"), str) or not a["answer"].strip():
            raise _Problem(f"option {LETTERS[i]} needs a non-empty 'answer' text")
        if not isinstance(a.get("correct"), bool):
            raise _Problem(f"option {LETTERS[i]} needs 'correct': true/false")
        if not isinstance(a.get("feedback"), str) or not a["feedback"].strip():
            raise _Problem(f"option {LETTERS[i]} needs a non-empty 'feedback'")
        texts.append(a["answer"].strip())
    dup = [t for t in set(texts) if texts.count(t) > 1]
    if dup:
        raise _Problem(f"options are not unique: {dup[0]!r} appears twice")
    letters = list(LETTERS[: len(answers)])
    ans = q["answer"]
    if q["kind"] == "single":
        if not isinstance(ans, str):
            raise _Problem("a single-choice 'answer' must be one letter, e.g. \"B\"")
        key = [ans]
    else:
        if not isinstance(ans, list) or not ans or not all(isinstance(x, str) for x in ans):
            raise _Problem("a multi-choice 'answer' must be a non-empty list of letters")
        if len(set(ans)) != len(ans):
            raise _Problem("'answer' repeats a letter")
        key = ans
    for x in key:
        if x not in letters:
            raise _Problem(f"answer {x!r} is not among the options {letters[0]}–{letters[-1]}")
    flags = [LETTERS[i] for i, a in enumerate(answers) if a["correct"]]
    if sorted(flags) != sorted(key):
        raise _Problem(
            f"'correct' flags mark {flags} but 'answer' is {ans!r} "
            "(fix one, or run `python -m batchlab.quiz sync`)"
        )
    for i, a in enumerate(answers):
        stale = FEEDBACK["multi_wrong"] if a["correct"] else FEEDBACK["multi_right"]
        if (a["feedback"] == stale or (not a["correct"] and a["feedback"].startswith("正确。"))
                or (q["kind"] == "multi" and not a["correct"] and a["feedback"].startswith("这一项应选"))
                or (q["kind"] == "multi" and a["correct"] and a["feedback"].startswith("这一项不应选"))):
            raise _Problem(f"feedback of option {LETTERS[i]} contradicts the key "
                           "(run `python -m batchlab.quiz sync`)")
    if q["kind"] == "single" and answers[letters.index(ans)]["feedback"] != right_feedback(q):
        raise _Problem("feedback of the correct option is not 正确。+ explanation "
                       "(run `python -m batchlab.quiz sync`)")
    _check_options(q, bank)
    return letters


def _check_numbers(q: dict) -> None:
    nums = q["numbers"]
    if not isinstance(nums, dict) or not nums:
        raise _Problem("'numbers' must map each quoted number to {\"expr\": …} or {\"source\": …}")
    for k, v in nums.items():
        if not re.fullmatch(r"\d+(?:,\d{3})*(?:\.\d+)?", k):
            raise _Problem(f"'numbers' key {k!r} is not a number as written in the text")
        if not isinstance(v, dict) or len(v) != 1 or next(iter(v)) not in ("expr", "source") \
                or not isinstance(next(iter(v.values())), str) or not next(iter(v.values())).strip():
            raise _Problem(f"'numbers'[{k!r}] must be {{\"expr\": \"…\"}} or {{\"source\": \"…\"}}")


def _check_numeric(q: dict) -> None:
    tol = q.get("tolerance")
    if not isinstance(tol, dict) or len(tol) != 1 or next(iter(tol)) not in ("abs", "rel"):
        raise _Problem("a numeric question needs 'tolerance': {\"abs\": x} or {\"rel\": r}")
    t = next(iter(tol.values()))
    if not _is_number(t) or t <= 0:
        raise _Problem("'tolerance' must be a positive number")
    if "rel" in tol and t >= 1:
        raise _Problem("a relative tolerance must be below 1 (0.01 = 1%)")
    if not _is_number(q["answer"]):
        raise _Problem("a numeric 'answer' must be a finite number")
    if "unit" in q:
        _nonempty_str(q, "unit")
    seeded = [k for k in _SEEDED if k in q]
    if seeded and len(seeded) != len(_SEEDED):
        missing = [k for k in _SEEDED if k not in q]
        raise _Problem(f"a seeded question needs {', '.join(_SEEDED)}; missing {missing}")
    if seeded:
        _check_seeded(q)
    answers = q["answers"] if isinstance(q["answers"], list) else []
    ranges = [a for a in answers if isinstance(a, dict) and a.get("type") == "range"]
    if not ranges:
        raise _Problem("numeric 'answers' need a jupyterquiz range (run `python -m batchlab.quiz sync`)")
    for a in q["answers"]:
        if not isinstance(a, dict) or not isinstance(a.get("feedback"), str) or not a["feedback"].strip():
            raise _Problem("every numeric 'answers' entry needs a non-empty 'feedback'")
    want = derive_fields(q)["answers"][0]["range"]
    got = ranges[0].get("range")
    if (not isinstance(got, list) or len(got) != 2 or not all(_is_number(x) for x in got)
            or any(abs(g - w) > 1e-6 * max(1.0, abs(w)) for g, w in zip(got, want))
            or ranges[0].get("correct") is not True
            or ranges[0].get("feedback") != right_feedback(q)):
        raise _Problem(
            f"jupyterquiz range {got} (or its feedback) does not match answer ± tolerance {want} "
            "(run `python -m batchlab.quiz sync`)"
        )


def _check_seeded(q: dict) -> None:
    f = _check_seeded_spec(q)
    if q["question"] != P.render_template(q["template"], q["defaults"]):
        raise _Problem("'question' is not the template rendered with 'defaults' "
                       "(run `python -m batchlab.quiz sync`)")
    want = f(**q["defaults"])
    if not math.isclose(q["answer"], want, rel_tol=1e-6, abs_tol=1e-9):
        raise _Problem(f"'answer' {q['answer']} differs from formula({q['defaults']}) = {want:g} "
                       "(run `python -m batchlab.quiz sync`)")


def _check_seeded_spec(q: dict) -> P.Formula:
    """Formula, parameters, defaults, template and explanation slots of a seeded question;
    the formula must evaluate on every parameter combination."""
    f = P.formula(q["formula"]) if isinstance(q["formula"], str) else None
    if f is None:
        raise _Problem("'formula' must be a name from batchlab.quiz.params.FORMULAS")
    params, defaults, template = q["params"], q["defaults"], q["template"]
    if not isinstance(params, dict) or not params:
        raise _Problem("'params' must map each parameter to a list of choices")
    for name, choices in params.items():
        if not isinstance(choices, list) or not choices:
            raise _Problem(f"parameter {name!r} needs a non-empty list of choices")
    if set(params) != set(f.param_names):
        raise _Problem(
            f"formula {f.name!r} takes {list(f.param_names)} but 'params' gives {list(params)}"
        )
    if not isinstance(defaults, dict) or set(defaults) != set(params):
        raise _Problem("'defaults' must give one value for every parameter")
    for name, v in defaults.items():
        if v not in params[name]:
            raise _Problem(f"default {name} = {v!r} is not among its choices")
    if not isinstance(template, str) or not template.strip():
        raise _Problem("'template' must be a non-empty string")
    used = set(P.placeholders(template))
    if used != set(params):
        raise _Problem(
            f"template placeholders {sorted(used)} do not match parameters {sorted(params)}"
        )
    n = math.prod(len(c) for c in params.values())
    if n > 20000:
        raise _Problem(f"{n} parameter combinations; keep it under 20000")
    names = list(params)
    for combo in itertools.product(*params.values()):
        values = dict(zip(names, combo))
        try:
            v = f(**values)
        except (ValueError, ZeroDivisionError, TypeError) as e:
            raise _Problem(f"formula fails for {values}: {e}") from None
        if not math.isfinite(v):
            raise _Problem(f"formula is not finite for {values}")
    extra = set(P.placeholders(str(q.get("explanation", "")))) - set(params) - {"answer"}
    if extra:
        raise _Problem(f"explanation placeholders {sorted(extra)} are neither parameters nor answer")
    return f


def _validate(q: Any, bank: str) -> None:
    if not isinstance(q, dict):
        raise _Problem("each question must be a JSON object")
    missing = [k for k in _REQUIRED if k not in q]
    if missing:
        raise _Problem(f"missing {', '.join(missing)}")
    unknown = sorted(set(q) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise _Problem(f"unknown keys {unknown}")
    if q["kind"] not in KINDS:
        raise _Problem(f"'kind' must be one of {sorted(KINDS)}, got {q['kind']!r}")
    if q["type"] != KINDS[q["kind"]]:
        raise _Problem(f"kind {q['kind']!r} needs jupyterquiz type {KINDS[q['kind']]!r}, "
                       f"got {q['type']!r}")
    if q["difficulty"] not in DIFFICULTIES:
        raise _Problem(f"'difficulty' must be one of {list(DIFFICULTIES)}")
    if q["chapter"] not in CHAPTERS:
        raise _Problem("'chapter' must be a two-digit string '00' … '10'")
    m = _BANK_RE.match(bank)
    if m and m.group(2) and q["chapter"] != m.group(2):
        raise _Problem(f"chapter {q['chapter']!r} in bank {bank!r}")
    for k in ("question", "explanation"):
        _nonempty_str(q, k)
    if "formula" not in q and P.placeholders(q["explanation"]):
        raise _Problem("only seeded questions may use {{…}} placeholders in 'explanation'")
    for k in ("erratum", "article_explanation", "key_note"):
        if k in q:
            _nonempty_str(q, k)
    if "see" in q and (not isinstance(q["see"], list)
                       or not all(isinstance(s, str) and s for s in q["see"])):
        raise _Problem("'see' must be a list of paths")
    if q["kind"] == "numeric":
        _check_numeric(q)
    else:
        extra = [k for k in ("tolerance", "unit", *_SEEDED) if k in q]
        if extra:
            raise _Problem(f"{extra} only apply to numeric questions")
        _check_choices(q, bank)
    if "numbers" in q:
        _check_numbers(q)


def _id_pattern(bank: str) -> re.Pattern[str]:
    if bank == "interview":
        return re.compile(r"^Q[1-9]\d*$")
    m = _BANK_RE.match(bank)
    if m:
        return re.compile(rf"^ch{m.group(2)}-\d+$")
    return re.compile(r"^[A-Za-z][\w.-]*$")


def parse_bank(data: Any, name: str, where: str) -> list[Question]:
    """Validate bank data (a list of question dicts); ValueError naming file, id and problem."""
    if not isinstance(data, list) or not data:
        raise ValueError(f"{where}: a bank must be a non-empty JSON array of questions")
    pat = _id_pattern(name)
    seen: set[str] = set()
    out = []
    for i, q in enumerate(data):
        qid = q.get("id") if isinstance(q, dict) else None
        label = qid if isinstance(qid, str) else f"question #{i + 1}"
        try:
            if not isinstance(qid, str) or not pat.match(qid):
                raise _Problem(f"'id' must match {pat.pattern}")
            if qid in seen:
                raise _Problem("duplicate id")
            _validate(q, name)
        except _Problem as e:
            raise ValueError(f"{where}: {label}: {e}") from None
        except ValueError as e:  # e.g. an unknown formula name
            raise ValueError(f"{where}: {label}: {e}") from None
        seen.add(qid)
        out.append(Question(q, name))
    if name == "interview":
        want = [f"Q{i}" for i in range(1, len(out) + 1)]
        if [q.id for q in out] != want:
            raise ValueError(f"{where}: interview ids must be Q1…Q{len(out)} in order")
    return out


def read_json(path: str | Path) -> Any:
    """Parse a bank file; ValueError with a one-line problem (no such file, not valid JSON,
    duplicate key, …) that the caller prefixes with what the file is."""
    return read_json_file(path, max_bytes=_MAX_BANK_BYTES, max_depth=16)


_MAX_BANK_BYTES = 4 << 20


def _read_json(path: Path) -> Any:
    try:
        return read_json(path)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def load_bank(bank: str | Path) -> Bank:
    """Load and validate a bank by name (`"interview"`, `"ch02"`) or path."""
    path = bank_path(bank)
    data = _read_json(path)
    name = path.stem
    return Bank(name, path, parse_bank(data, name, str(path)))


def load_all(folder: Path | None = None) -> dict[str, Bank]:
    """Every bank in the quiz folder, validated; ids must be unique across banks."""
    folder = folder or quiz_dir()
    banks = {n: load_bank(folder / f"{n}.json") for n in list_banks(folder)}
    owner: dict[str, str] = {}
    for name, b in banks.items():
        for qid in b.ids:
            if qid in owner:
                raise ValueError(f"{b.path}: {qid}: id also used in bank {owner[qid]!r}")
            owner[qid] = name
    return banks


# --- derived jupyterquiz fields and `sync` --------------------------------------------------


def _round(x: float) -> float:
    return float(f"{x:.10g}")


def _render_explanation(q: dict[str, Any], values: dict[str, Any], value: float) -> str:
    """A seeded question's explanation with the learner's parameters and answer filled in."""
    return P.render_template(q["explanation"], {**values, "answer": P.fmt_number(value)})


def right_feedback(q: dict[str, Any]) -> str:
    """The jupyterquiz feedback of a correct single-choice option or numeric range: always
    `正确。` + explanation (+ 勘误), so Jupyter Book readers see the same explanation (seeded
    questions: rendered with the default parameters)."""
    expl = q.get("explanation", "")
    if all(k in q for k in _SEEDED) and isinstance(q.get("defaults"), dict):
        f = P.formula(q["formula"])
        expl = _render_explanation(q, q["defaults"], f(**q["defaults"]))
    text = "正确。" + expl
    if q.get("erratum"):
        text += "\n\n勘误：" + q["erratum"]
    return text


def derive_fields(q: dict[str, Any]) -> dict[str, Any]:
    """The jupyterquiz fields that follow from ours: `type`, `answers` flags/ranges, and for a
    seeded question `question` and `answer`. Existing feedback texts are kept."""
    kind = q.get("kind")
    if kind not in KINDS:
        raise _Problem(f"'kind' must be one of {sorted(KINDS)}")
    out: dict[str, Any] = {"type": KINDS[kind]}
    if kind == "numeric":
        if all(k in q for k in _SEEDED):
            f = _check_seeded_spec(q)
            out["question"] = P.render_template(q["template"], q["defaults"])
            out["answer"] = _round(f(**q["defaults"]))
        value = float(out.get("answer", q.get("answer")))
        tmp = Question({**q, **out}, "")
        tol = tmp.tolerance(value)
        old = q.get("answers") if isinstance(q.get("answers"), list) else []
        old_fb = {a.get("type"): a.get("feedback") for a in old if isinstance(a, dict)}
        out["answers"] = [
            {"type": "range", "range": [_round(value - tol), _round(value + tol)],
             "correct": True, "feedback": right_feedback(q)},
            {"type": "default", "feedback": old_fb.get("default") or FEEDBACK["numeric_wrong"]},
        ]
        return out
    ans = q.get("answer")
    key = [ans] if isinstance(ans, str) else list(ans or [])
    answers = []
    for i, a in enumerate(q.get("answers", [])):
        text = a["answer"] if isinstance(a, dict) else a
        correct = LETTERS[i] in key
        fb = a.get("feedback") if isinstance(a, dict) else None
        if kind == "single" and correct:
            fb = right_feedback(q)
        elif not fb or fb.startswith("正确。") or fb in FEEDBACK.values():
            if kind == "single":
                fb = FEEDBACK["single_wrong"]
            else:
                fb = FEEDBACK["multi_right"] if correct else FEEDBACK["multi_wrong"]
        opt = dict(a) if isinstance(a, dict) else {}
        opt.update(answer=text, correct=correct, feedback=fb)
        answers.append({k: opt[k] for k in _OPTION_KEYS if k in opt}
                       | {k: v for k, v in opt.items() if k not in _OPTION_KEYS})
    out["answers"] = answers
    return out


def _ordered(q: dict[str, Any]) -> dict[str, Any]:
    return {k: q[k] for k in _KEY_ORDER if k in q} | {k: v for k, v in q.items() if k not in _KEY_ORDER}


def sync_file(path: str | Path) -> int:
    """Fill a bank file's derived jupyterquiz fields from ours, validate, rewrite; returns the
    number of questions. Option texts may be given as plain strings in `answers`."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: a bank must be a JSON array of questions")
    out = []
    for i, q in enumerate(data):
        label = q.get("id", f"question #{i + 1}") if isinstance(q, dict) else f"question #{i + 1}"
        try:
            if not isinstance(q, dict):
                raise _Problem("each question must be a JSON object")
            out.append(_ordered({**q, **derive_fields(q)}))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: {label}: cannot derive fields: {e}") from None
    parse_bank(out, path.stem, str(path))
    path.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return len(out)
