"""Item statistics: difficulty, discrimination and flags on a planted class of learners."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from batchlab.quiz import grade_submission, item_stats, load_bank, seed_for, stats_table

BANK = load_bank("ch02")
EASY, REVERSED = "ch02-7", "ch02-5"       # planted: everyone right; only the weakest right


def _answer(q, learner: str, right: bool, rng: np.random.Generator):
    seed = seed_for(learner)
    if q.kind == "numeric":
        v = q.expected(seed)
        return v if right else v * 3 + 7
    key = q.expected_ids(seed)
    if right:
        return key
    wrong = [o for o in q.option_ids if o not in (key if isinstance(key, list) else [key])]
    pick = wrong[int(rng.integers(len(wrong)))]
    return pick if q.kind == "single" else [pick]


def _class(n: int = 60) -> list[dict]:
    rng = np.random.default_rng(7)
    subs = []
    for i in range(n):
        learner, ability = f"s{i:02d}", (i + 0.5) / n
        sub = {"_bank": "ch02", "_learner": learner}
        for q in BANK:
            if q.id == EASY:
                right = True
            elif q.id == REVERSED:
                right = ability < 0.3
            else:
                right = bool(rng.random() < ability)
            sub[q.id] = _answer(q, learner, right, rng)
        subs.append(sub)
    return subs


@pytest.fixture(scope="module")
def reports() -> list[dict]:
    return [grade_submission(s, file=f"s{i}.json") for i, s in enumerate(_class())]


def test_difficulty_and_discrimination_match_an_independent_computation(reports) -> None:
    rows = {r["id"]: r for r in item_stats(reports, BANK)}
    for q in BANK:
        item = np.array([r["results"][q.id]["correct"] for r in reports], float)
        total = np.array([r["score"] for r in reports], float)
        rest = (total - item) / (len(BANK) - 1)
        assert rows[q.id]["n"] == 60 and rows[q.id]["p"] == pytest.approx(item.mean())
        if item.std() > 0:
            assert rows[q.id]["r"] == pytest.approx(np.corrcoef(item, rest)[0, 1])
        else:
            assert rows[q.id]["r"] is None


def test_flags_find_the_planted_items(reports) -> None:
    rows = {r["id"]: r for r in item_stats(reports, BANK)}
    assert "everyone-right" in rows[EASY]["flags"] and rows[EASY]["p"] == 1.0
    assert "strongest-miss" in rows[REVERSED]["flags"] and rows[REVERSED]["r"] < 0
    assert rows[REVERSED]["upper_p"] < rows[REVERSED]["lower_p"]
    normal = [rows[q.id] for q in BANK if q.id not in (EASY, REVERSED)]
    assert all(r["r"] > 0 and "strongest-miss" not in r["flags"] for r in normal)
    assert np.mean([r["r"] for r in normal]) > 0.25
    opts = rows["ch02-4"]["options"]
    assert set(opts) == set(BANK["ch02-4"].option_ids) and sum(opts.values()) == 60


def test_table_and_partial_quizzes(reports) -> None:
    text = stats_table(item_stats(reports, BANK), BANK, len(reports))
    assert "ch02-5" in text and "strongest-miss" in text and "高分学员反而答错" in text
    b = load_bank("ch03")
    few = [grade_submission({"_bank": "ch03", "_learner": f"x{i}", "_shown": b.pick(3, seed_for(f"x{i}"))})
           for i in range(4)]
    rows = item_stats(few, b)
    assert sum(r["n"] for r in rows) == 12 and all("few-learners" in r["flags"] for r in rows)
    with pytest.raises(ValueError, match="not 'ch03'"):
        item_stats(reports, b)


def test_stats_cli(tmp_path: Path) -> None:
    files = []
    for i, s in enumerate(_class(20)):
        p = tmp_path / f"s{i:02d}.json"
        p.write_text(json.dumps(s), "utf-8")
        files.append(str(p))
    bad = tmp_path / "zz_bad.json"
    bad.write_text("{", "utf-8")
    r = subprocess.run([sys.executable, "-m", "batchlab.quiz", "stats", *files, str(bad), "--bank", "ch02"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "zz_bad.json: not valid JSON" in r.stderr
    assert "题库 ch02：20 份答卷" in r.stdout and "everyone-right" in r.stdout
    r = subprocess.run([sys.executable, "-m", "batchlab.quiz", "stats", *files, "--json"],
                       capture_output=True, text=True, timeout=60)
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 0 and [x["id"] for x in rows] == BANK.ids and rows[0]["n"] == 20
