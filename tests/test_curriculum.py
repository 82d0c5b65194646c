"""The course reads as a curriculum (course-design.md): one 「原文说 / 实际」 sidebar per chapter with
the corrections in one appendix, the chapter shape (goals up front; summary, exercises, references at
the end), an answer for every exercise, a learning path with a glossary, and one vocabulary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ERRATA = ROOT / "notebooks" / "appendix_errata.ipynb"
EXERCISES = ROOT / "solutions" / "exercises.ipynb"
LEARNER_FACING = (CHAPTERS + sorted((ROOT / "notebooks").glob("appendix_*.ipynb"))
                  + [ROOT / "notebooks" / "index.ipynb"] + sorted((ROOT / "solutions").glob("*.ipynb"))
                  + sorted((ROOT / "labs").glob("*.ipynb")))
BANKS = sorted((ROOT / "quiz").glob("*.json"))
#: the article's ten interview questions, reproduced word for word (the graded key stays the article's)
VERBATIM_BANKS = {"interview.json"}

EXERCISE = re.compile(r"练习\s*(\d+)\.(\d+)")
ROW_ID = re.compile(r"\bE-[a-z0-9][a-z0-9-]*[a-z0-9]\b")
#: words the design note's vocabulary table rules out, and what to write instead
BANNED = {"拼批": "合批", "凑批": "合批", "组批": "合批"}
BANNED_WORD = re.compile(r"拼批|凑批|(?<!重)组批")  # 重组批次 (regroup a batch) is not 组批
UPPER_PERCENTILE = re.compile(r"(?<![A-Za-z0-9_])P(?:50|90|95|99)(?![0-9])")
#: 延迟 (latency) written for the max_queue_delay setting: "延迟为 0", "把延迟从 10 ms 改成 …"
DELAY_AS_LATENCY = re.compile(r"(?<![均p0-9])延迟\s*(?:为|=|设为|设成|改成)\s*0(?![.\d])|把延迟(?:从|设|改|调)|max_queue_delay\S*（延迟）")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(cell: dict) -> str:
    return "".join(cell["source"])


def _markdown(path: Path) -> list[str]:
    return [_text(c) for c in _cells(path) if c["cell_type"] == "markdown"]


def _headings(path: Path, level: str = "## ") -> list[str]:
    return [ln[len(level):].strip() for t in _markdown(path) for ln in t.splitlines() if ln.startswith(level)]


def test_the_files_are_found() -> None:
    assert len(CHAPTERS) == 12 and ERRATA.exists() and EXERCISES.exists() and BANKS


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_holds_at_most_one_sidebar_on_the_article(path: Path) -> None:
    hits = [i for i, t in enumerate(_markdown(path)) if "勘误" in t or "原文说" in t]
    assert len(hits) <= 1, f"{path.name}: markdown cells {hits} mention 勘误/原文说 (one sidebar per chapter)"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_has_the_course_shape(path: Path) -> None:
    first = _text(_cells(path)[0])
    missing = [w for w in ("**本章目标**", "**前置**", "**用时**") if w not in first]
    assert not missing, f"{path.name}: the first cell lacks {missing}"
    heads = [h for h in _headings(path) if h != "自测题"]
    assert heads[-3:] == ["小结", "练习", "参考文献"], f"{path.name}: ends with {heads[-3:]}"


def _exercises(path: Path) -> set[str]:
    return {f"{a}.{b}" for t in _markdown(path) for a, b in EXERCISE.findall(t)}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_has_three_to_five_exercises_of_its_own(path: Path) -> None:
    n = int(path.name[:2])
    own = {e for e in _exercises(path) if int(e.split(".")[0]) == n}
    assert 3 <= len(own) <= 5, f"{path.name}: exercises {sorted(own)} (3 to 5, numbered 练习 {n}.k)"


def test_every_exercise_has_an_answer_under_its_number() -> None:
    asked = {e for p in CHAPTERS for e in _exercises(p) if int(e.split(".")[0]) == int(p.name[:2])}
    answered = {f"{a}.{b}" for h in _headings(EXERCISES, "### ") for a, b in EXERCISE.findall(h)}
    assert asked - answered == set(), f"exercises without an answer: {sorted(asked - answered)}"
    assert answered - asked == set(), f"answers to no exercise: {sorted(answered - asked)}"


def test_the_errata_appendix_holds_every_row_a_chapter_links() -> None:
    rows = [h for h in _headings(ERRATA, "### ") if ROW_ID.fullmatch(h)]
    assert rows and len(rows) == len(set(rows)), "the appendix lists each correction once, as ### E-…"
    linked = {r for p in CHAPTERS for t in _markdown(p) for r in ROW_ID.findall(t)}
    assert linked - set(rows) == set(), f"chapters link rows the appendix lacks: {sorted(linked - set(rows))}"
    assert set(rows) - linked == set(), f"rows no chapter links: {sorted(set(rows) - linked)}"


def _shown(path: Path) -> str:
    """A notebook's markdown and the text its code cells printed or displayed."""
    out = _markdown(path)
    for c in _cells(path):
        for o in c.get("outputs", []):
            out.append("".join(o.get("text", "")))
            out += ["".join(o.get("data", {}).get(k, "")) for k in ("text/markdown", "text/plain")]
    return "\n".join(out)


def test_the_course_map_has_a_learning_path_and_a_glossary() -> None:
    index = _shown(ROOT / "notebooks" / "index.ipynb")
    assert "术语表" in index and "分钟" in index and "前置" in index
    for name in ("appendix_errata.ipynb", "solutions/exercises.ipynb"):
        assert name in index, f"the course map does not link {name}"


def test_lab_1_goes_back_to_the_course_map() -> None:
    for folder in ("labs", "solutions"):
        nav = _text(_cells(ROOT / folder / "lab1_first_pot.ipynb")[0]).splitlines()[0]
        assert "lab6" not in nav and "index.ipynb" in nav.split("|")[0], nav


def _learner_text() -> list[tuple[str, str]]:
    """Every cell's source and every quiz bank; the appendix's quotes of the article (**原文** lines) are
    the article's words and stay as written."""
    out = [(f"{p.parent.name}/{p.name}", "\n".join(ln for ln in _text(c).splitlines() if not ln.startswith("**原文**")))
           for p in LEARNER_FACING for c in _cells(p)]
    return out + [(f"quiz/{b.name}", b.read_text(encoding="utf-8")) for b in BANKS if b.name not in VERBATIM_BANKS]


def test_one_vocabulary() -> None:
    bad = []
    for where, text in _learner_text():
        bad += [f"{where}: {m.group(0)} (write {BANNED[m.group(0)]})" for m in BANNED_WORD.finditer(text)]
        bad += [f"{where}: {m.group(0)} (lower case)" for m in UPPER_PERCENTILE.finditer(text)]
        bad += [f"{where}: …{m.group(0)}… (the setting is 排队延时)" for m in DELAY_AS_LATENCY.finditer(text)]
    assert not bad, "\n".join(bad[:40])


def test_the_vocabulary_rules_catch_planted_words() -> None:
    assert UPPER_PERCENTILE.search("尾延迟 P99 很高") and not UPPER_PERCENTILE.search("p99 与 GP990")
    assert DELAY_AS_LATENCY.search("把延迟从 10 ms 改成 100 ms") and DELAY_AS_LATENCY.search("延迟为 0 时")
    assert not DELAY_AS_LATENCY.search("p99 延迟为 5 ms") and not DELAY_AS_LATENCY.search("排队延时为 0 时")
    assert not DELAY_AS_LATENCY.search("平均延迟从 4.57 s 降到 1.11 s")
    assert BANNED_WORD.search("先凑批再说") and not BANNED_WORD.search("每步重组批次")


def test_no_nbval_comment_in_a_code_cell() -> None:
    bad = [f"{p.parent.name}/{p.name} cell {i}" for p in LEARNER_FACING for i, c in enumerate(_cells(p))
           if c["cell_type"] == "code" and re.search(r"^\s*#\s*NBVAL_", _text(c), re.M)]
    assert not bad, f"nbval markers belong in cell tags: {bad}"
