"""The course map's learning path: every chapter and lab timed, every lab placed after a chapter,
the routes made of stops that exist (read with `json` only: nothing is executed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from batchlab.course import learning_path as LP

ROOT = Path(__file__).resolve().parents[1]


def test_every_chapter_and_lab_is_on_the_path_once() -> None:
    chapters = {f"ch{p.name[:2]}" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    labs = {f"lab{p.name[3]}" for p in (ROOT / "labs").glob("lab*.ipynb")}
    assert set(LP.CHAPTERS) == chapters and set(LP.LABS) == labs
    assert sorted(LP.SELF_STUDY) == sorted(chapters | labs)
    for item in LP.ITEMS.values():
        assert item.key in LP.EXTRAS or (ROOT / item.file).is_file(), item.file


def test_each_lab_comes_after_the_chapter_it_follows() -> None:
    for lab, before in LP.LAB_AFTER.items():
        assert LP.SELF_STUDY.index(before) < LP.SELF_STUDY.index(lab), lab


def test_minutes_follow_the_stated_times_and_the_rule() -> None:
    for key, item in LP.LABS.items():
        first = "".join(json.loads((ROOT / item.file).read_text("utf-8"))["cells"][0]["source"])
        assert LP.minutes(key, ROOT) == int(re.search(r"本实验目标\*\*（约 (\d+) 分钟", first).group(1)), key
    for key in LP.CHAPTERS:
        m = LP.minutes(key, ROOT)
        assert m is not None and m % 5 == 0 and m >= 5, key
    assert LP.round5(12.4) == 10 and LP.round5(12.5) == 15 and LP.round5(1) == 5


def test_routes_are_made_of_known_stops() -> None:
    stops = [k for keys in LP.WEEKEND.values() for k in keys]
    stops += [k for _, keys, lab in LP.LESSONS for k in keys + ([lab] if lab else [])]
    assert set(stops) <= set(LP.ITEMS)
    assert {lab for _, _, lab in LP.LESSONS if lab} == set(LP.LABS)
    text = LP.routes_text(ROOT)
    assert all(f"第 {i} 课" in text for i in range(1, len(LP.LESSONS) + 1))
