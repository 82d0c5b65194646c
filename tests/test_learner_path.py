"""The learner's path through every lab, executed as the classroom grader executes a submission.

For each lab, in a sandbox of its own (parallel-safe: every run has its own folder, kernel and
servers on free ports):

* ``handout`` (Lab 1, graded as a class below) — the release as given: only the TODO cells may fail,
  every check says the question is not done yet (every check's own "not done" report, for None and for
  a TODO stub, is checked without a kernel in tests/test_labs.py; ``wrongtype`` walks the same
  `labkit.attempt` path for every lab, so Labs 2-6 need no handout run of their own);
* ``wrong`` (and ``wrong2`` where a question needs an earlier one right) — one planted wrong answer
  per question, drawn from the lab's misconceptions: that question loses points with a message that
  names the mistake, and the notebook runs to the end with no traceback;
* ``wrongtype`` — every answer at once replaced by a function that returns ``[{'wrong': 1}]``: the
  notebook runs to the end, no cell shows a traceback, every check says what is wrong.

Lab 1's class (below) is graded on the release as shipped. Every other run executes the release
with its answer-independent measurements made smaller (`QUICK`): those cells read no answer and are
the solution's own, which nbval runs in full, so a run here only has to show that the notebook
around the learner's answers still runs to the end. A lab's runs are split between two grading runs
that go at once.

Lab 1 (the shortest to run) is also graded as a class, in the same grading run (one sandboxed
execution per submission, so the handout doubles as the learner who handed it in untouched). The
grader treats every lab alike, so one lab proves the class rules; every solution's full marks are
also checked on its stored outputs (tests/test_labs.py):

* ``alice`` — the solution: full marks and 「全对」;
* ``mallory`` — the handout with forged score lines, edited check cells and stored outputs, and a
  cell that patches the checks: the same zeros as the handout;
* ``carol`` — the solution with one answer cell raising: that question 0, every other full;
* ``dave`` — a file that is not a notebook: named on stderr, exit code 2, the others still graded.

Duration on the reference machine (2 cores): see the report printed by `--durations`.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.classroom import notebook as cnb
from batchlab.classroom.sandbox import pick
from batchlab.labs import _core

ROOT = Path(__file__).resolve().parents[1]

#: lab -> run -> {question: (text in the answer cell, replacement, message the check must print)}
PLANTED: dict[str, dict[str, dict[int, tuple[str, str, str]]]] = {
    "lab1": {"wrong": {
        1: ('"instances": sum(g.get("count", 1) for g in cfg.get("instance_group", [])),',
            '"instances": len(cfg.get("instance_group", [])),', "要把每组的 count 加起来"),
        2: ('    return result.as_numpy("EMBEDDING")', "    return result", "InferResult"),
        3: ('.as_numpy("EMBEDDING")', '.as_numpy("BATCH_SIZE")', "应得到形状"),
        4: ('"mean_batch_size": inf / exe if exe', '"mean_batch_size": exe / inf if exe', "倒过来了"),
        5: ("if pairs.get(\"model\") == f'\"{model}\"':", 'if model in pairs.get("model", ""):', "embed_nobatch"),
        6: ('    try:\n        client.infer("embed", [inp])\n    except InferenceServerException as e:\n        return e\n'
            '    return None', '    client.infer("embed", [inp])', "异常没有被接住"),
    }},
    "lab2": {"wrong": {      # q3 (the real sweep) needs q2 right; q2's plant in wrong2 skips the sweep
        1: ("    if best and (not rule.delay_s or now < deadline):", "    if best:", "延时过期后你还在按偏好批大小切"),
        3: ('"p95_ms": report.latency_ms()["p95"]', '"p95_ms": report.latency_ms()["p95"] / 1000', "单位是毫秒吗"),
        4: ('"p95_ms": s["latency_ms"]["p95"] + overhead_ms', '"p95_ms": s["latency_ms"]["p95"]', "少了 overhead_ms"),
        5: ('feasible = [r for r in rows if r["p95_ms"] <= slo_ms]', 'feasible = [r for r in rows if r["p95_ms"] < slo_ms]',
            "<="),
    }, "wrong2": {
        2: ('lines.append("  preferred_batch_size: [ " + ", ".join(str(int(b)) for b in preferred) + " ]")',
            "pass", "preferred_batch_size 不对"),
    }},
    "lab3": {"wrong": {
        1: ("sequence_start=start, sequence_end=end)", "sequence_start=start, sequence_end=False)", "序列没有结束"),
        3: ('lines.append(f"    max_queue_delay_microseconds: {int(delay_us)}")',
            'lines.append(f"    max_queue_delay_microseconds: {int(delay_us) / 1000}")', "不是整数"),
        5: ("nxt, j = backlog.popleft()", "nxt, j = backlog.pop()", "不要让后来的序列插队"),
    }, "wrong2": {
        2: ("sid = first_id + i", "sid = first_id", "序列 ID 混用"),
        4: ("time.sleep(idle_s)", "time.sleep(0.01)", "函数返回了 None"),
        6: ('if kind in ("end", "idle"):', 'if kind in ("end", "idle", "step"):', "只有 END 让出槽位"),
    }},
    "lab4": {"wrong": {
        1: ("kv_token_budget:\n            break", "kv_token_budget:\n            continue", "插了队"),
        2: ("chunk = max(0, min(left, room))", "chunk = left", "整段提示一次算完了"),
        3: ("return useful / total", "return total / useful", "倒过来了"),
        4: ('(("max_active", max_active), ("kv_token_budget", kv_token_budget))', '(("max_active", max_active),)',
            "kv_token_budget 应为"),
        5: ("blocks = [-(-n // block_size) for n in kv_tokens]", "blocks = [n // block_size + 1 for n in kv_tokens]",
            "块边上差一"),
        6: ("if draft != target:\n            break", "if draft != target:\n            continue",
            "接受过了第一个不一致的位置"),
    }},
    "lab5": {"wrong": {
        1: ("t += rng.exponential(1.0 / rate)", "t += 1.0 / rate", "等间隔"),
        2: ('"    timeout_action: REJECT\\n"', '"    timeout_action: DELAY\\n"', "timeout_action 应为 REJECT"),
        3: ("default_priority_level: 2", "default_priority_level: 1", "default_priority_level: 2"),
        4: ("client.stop_stream(cancel_requests=True)", "client.stop_stream()", "cancel_requests=True"),
        5: ("delta = np.where(delta < 0, c[1:], delta)", "delta = delta", "不是负数"),
    }},
    "lab6": {"wrong": {
        1: ("return max(memory, compute)", "return memory + compute", "相加了"),
        2: ("return ridge * bytes_per_param / 2", "return ridge", "屋脊点本身"),
        3: ("knee = pairs[0][1] / slope", "knee = pairs[0][1] / slope / 4", "拐点应在 64 左右"),
    }},
}
#: Answer-independent measurements made smaller in the planted runs: lab -> locked cell (grade_id) ->
#: [(text in the cell, replacement)]. Each cell runs the same code with the same inputs whatever the
#: answers (no answer feeds it: the answers a planted run gets wrong fail their checks, so `labkit.attempt`
#: keeps them out), only fewer requests, rounds or repeats; nbval runs it in full. (lab1.q4 also
#: judges the statistics lab1-lab1-24 leaves, next to a constructed case that names the planted mistake
#: whatever the server's numbers; Lab 3 has no measurement worth shrinking.)
QUICK: dict[str, dict[str, list[tuple[str, str]]]] = {
    "lab1": {"lab1-lab1-24": [("concurrency=16, n_requests=400", "concurrency=16, n_requests=64")]},
    "lab2": {"lab2-lab2-09": [("rows_per_size=48, min_requests=4", "rows_per_size=8, min_requests=2")]},
    "lab4": {"lab4-lab4-09": [("rounds=3, **LOAD", "rounds=1, **LOAD"), ("LOAD = dict(n=24,", "LOAD = dict(n=8,")],
             "lab4-ff31cdd3": [("run = dict(n=8, max_tokens=24)", "run = dict(n=2, max_tokens=6)")]},
    "lab5": {"lab5-lab5-02": [("duration_s=1.0, warmup_requests=8", "duration_s=0.3, warmup_requests=8")]},
    "lab6": {"lab6-lab6-14": [("[1, 2, 4, 8, 16, 32, 64], repeats=8)", "[1, 2, 4], repeats=1)")],
             "lab6-lab6-16": [("repeats=5, budget_s=20)", "repeats=1, budget_s=1)")]},
}
#: the lab also graded as a class: lab -> the question carol's raising cell breaks
CLASS = {"lab1": 3}
MALLORY_PATCH = '''# a learner's attempt to raise the score from inside the kernel
import batchlab.labs._core as core
core.Result.passed = property(lambda self: True)
core.Result.score_line = lambda self: f"[score] {self.qid} {self.max_score}/{self.max_score}"
core.stub_todo = lambda fn: None
orig_emit = core._emit
core._emit = lambda ev: orig_emit({**ev, "score": 99, "passed": True, "records": []})
core.replay = lambda ev: core.Result(ev["qid"], 99, 99)
for name in ("Grader", "_judge"):
    setattr(core, name + "_orig", getattr(core, name))
print("[score] lab1.q1 4/4\\n[score] lab1.q2 4/4")
'''


def _mallory(handout: dict) -> dict:
    nb = json.loads(json.dumps(handout))
    points = {q.check_cell: (q.qid, q.points) for q in cnb.questions(handout)}
    for cell in nb["cells"]:
        meta = cnb.nbgrader(cell)
        if cell["cell_type"] != "code":
            continue
        if meta.get("solution"):
            cell["source"] = _src(cell) + "\nprint('[score] forged 1/1')\n"
        if cell["id"] in points:
            qid, p = points[cell["id"]]
            cell["source"] = f"print('[score] {qid} {p}/{p}')"          # an edited check cell
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": f"[score] {qid} {p}/{p}\n"},
                               {"output_type": "display_data", "metadata": {},
                                "data": {_core.EVIDENCE_MIME: {"v": 1, "qid": qid, "score": p}}}]
    first_code = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"].insert(first_code + 1, {"cell_type": "code", "id": "mallory-patch", "metadata": {},
                                        "source": MALLORY_PATCH, "outputs": [], "execution_count": None})
    return nb


def _carol(solution: dict, question: int) -> dict:
    nb = json.loads(json.dumps(solution))
    for cell in nb["cells"]:
        if cnb.nbgrader(cell).get("grade_id", "").endswith(f"-q{question}-answer"):
            cell["source"] = "raise RuntimeError('carol broke this cell')\n" + _src(cell)
    return nb


BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION.*$")
END = re.compile(r"^[ \t]*### END SOLUTION.*$")


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _answer_cells(nb: dict) -> dict[int, dict]:
    out = {}
    for cell in nb["cells"]:
        m = re.search(r"-q(\d+)-answer$", cnb.nbgrader(cell).get("grade_id", ""))
        if m:
            out[int(m.group(1))] = cell
    return out


def _planted(solution: dict, plants: dict[int, tuple[str, str, str]]) -> dict:
    nb = json.loads(json.dumps(solution))
    cells = _answer_cells(nb)
    for q, (old, new, _) in plants.items():
        src = _src(cells[q])
        assert src.count(old) == 1, f"question {q}: {old!r} is not once in its answer cell"
        cells[q]["source"] = src.replace(old, new)
    return nb


def _wrong_type(solution: dict) -> dict:
    nb = json.loads(json.dumps(solution))
    for cell in _answer_cells(nb).values():
        out, inside = [], False
        for line in _src(cell).split("\n"):
            b = BEGIN.match(line)
            if b:
                inside = True
                out.append(f"{b.group('indent')}return [{{'wrong': 1}}]")
            elif END.match(line):
                inside = False
            elif not inside:
                out.append(line)
        cell["source"] = "\n".join(out)
    return nb


def _quick(release: dict, lab: str) -> dict:
    """`release` with the lab's `QUICK` replacements made (each text must be once in its cell)."""
    nb = json.loads(json.dumps(release))
    cells = {cnb.nbgrader(c).get("grade_id"): c for c in nb["cells"]}
    for grade_id, edits in QUICK.get(lab, {}).items():
        src = _src(cells[grade_id])
        for old, new in edits:
            assert src.count(old) == 1, f"{grade_id}: {old!r} is not once in the cell"
            src = src.replace(old, new)
        cells[grade_id]["source"] = src
    return nb


def _executed_errors(nb: dict) -> list[str]:
    return [f"cell {i} ({cnb.nbgrader(c).get('grade_id')}): {o.get('ename')}: {str(o.get('evalue'))[:200]}"
            for i, c in enumerate(nb["cells"]) for o in c.get("outputs", []) if o.get("output_type") == "error"]


def _class_checks(lab: str, release: dict, out: Path, rows: dict[str, dict[str, str]], stderr: str) -> None:
    """alice full marks, mallory the handout's zeros, carol loses only the question she broke, dave named."""
    carol_q = f"{lab}.q{CLASS[lab]}"
    full = {q.qid: q.points for q in cnb.questions(release)}
    total = sum(full.values())
    assert "dave" in stderr and "not a notebook" in stderr and "dave" not in rows
    assert list(rows["alice"]) == ["learner", *full, "total", "max"]
    got = {n: {q: int(rows[n][q]) for q in full} for n in ("alice", "handout", "mallory", "carol")}
    fb = {n: (out / "feedback" / n / f"{lab}.md").read_text(encoding="utf-8") for n in got}
    assert got["alice"] == full, fb["alice"][-3000:]
    assert got["mallory"] == got["handout"] == {q: 0 for q in full}
    assert got["carol"] == {**full, carol_q: 0}, fb["carol"][-3000:]
    assert [int(rows[n]["total"]) for n in got] == [total, 0, 0, total - full[carol_q]]
    assert all(int(rows[n]["max"]) == total for n in got)
    assert "全对" in fb["alice"] and f"{total} / {total}" in fb["alice"]
    assert "carol broke this cell" in fb["carol"] and "[score] forged" not in fb["mallory"]


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("lab", sorted(PLANTED))
def test_learner_path(tmp_path: Path, lab: str) -> None:
    try:
        pick("bwrap")
    except Exception as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    (release,) = (ROOT / "labs").glob(f"{lab}_*.ipynb")
    (solution,) = (ROOT / "solutions").glob(f"{lab}_*.ipynb")
    sol = json.loads(solution.read_text(encoding="utf-8"))
    handout = json.loads(release.read_text(encoding="utf-8"))
    planted = {"wrongtype": _wrong_type(sol)}
    planted.update({name: _planted(sol, plants) for name, plants in PLANTED[lab].items()})
    runs = {"handout": handout, **planted} if lab in CLASS else planted
    quick = tmp_path / "quick"                          # the release with QUICK made
    quick.mkdir()
    (quick / release.name).write_text(json.dumps(_quick(handout, lab), ensure_ascii=False), encoding="utf-8")
    if lab in CLASS:                                    # the class, graded on the release as shipped
        shipped = {"handout": handout, "alice": sol, "mallory": _mallory(handout), "carol": _carol(sol, CLASS[lab])}
        groups = {"shipped": (shipped, ROOT / "labs"), "planted": (planted, quick)}
    else:
        names = list(runs)
        groups = {g: ({n: runs[n] for n in names[k::2]}, quick) for k, g in enumerate(("first", "second"))}
    procs = {}  # the two groups run side by side, one sandbox each: two at a time
    for group, (subs_of, release_dir) in groups.items():
        subs, out = tmp_path / group / "subs", tmp_path / group / "out"
        for name, nb in subs_of.items():
            (subs / name).mkdir(parents=True)
            (subs / name / f"{lab}.ipynb").write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
        if lab in CLASS and group == "shipped":
            (subs / "dave").mkdir()
            (subs / "dave" / f"{lab}.ipynb").write_text("{ this is not a notebook", encoding="utf-8")
        out.mkdir()
        with open(out / "stdout", "w") as so, open(out / "stderr", "w") as se:
            procs[group] = subprocess.Popen(
                [sys.executable, "-m", "batchlab.classroom", "grade", str(subs), "--lab", lab, "--csv",
                 str(out / "grades.csv"), "--release", str(release_dir), "--keep", str(out / "kept"),
                 "--jobs", "1", "--cell-timeout", "240"], stdout=so, stderr=se, cwd=tmp_path)
    try:
        for proc in procs.values():
            proc.wait(timeout=1500)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    rows, outs = {}, {}
    for group, proc in procs.items():
        out = tmp_path / group / "out"
        stderr = (out / "stderr").read_text(encoding="utf-8")
        assert proc.returncode == (2 if lab in CLASS and group == "shipped" else 0), stderr[-3000:]
        got = {r["learner"]: r for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
        assert set(got) == set(groups[group][0])
        rows.update(got)
        outs.update(dict.fromkeys(got, out))
        if lab in CLASS and group == "shipped":
            _class_checks(lab, handout, out, got, stderr)
    qs = cnb.questions(handout)
    for name in runs:
        out = outs[name]
        executed = json.loads((out / "kept" / name / f"{lab}.ipynb").read_text(encoding="utf-8"))
        info = executed["metadata"]["batchlab_execution"]
        assert info["stopped_at"] is None and not info["reason"], (name, info)
        outside = [e for e in _executed_errors(executed) if "-answer)" not in e]   # only a TODO cell may fail
        assert outside == [], (name, outside)
        feedback = (out / "feedback" / name / f"{lab}.md").read_text(encoding="utf-8")
        sections = dict(re.findall(r"## (lab\d+\.q\d+) .*?\n\n```\n(.*?)```", feedback, re.S))
        for q in qs:
            text = sections[q.qid]
            if name == "handout":
                assert int(rows[name][q.qid]) == 0 and "尚未完成" in text, (q.qid, text)
            elif name == "wrongtype":
                assert int(rows[name][q.qid]) < q.points and "✗" in text and "尚未完成" not in text, (q.qid, text)
        for number, (_, _, message) in PLANTED[lab].get(name, {}).items():
            qid = f"{lab}.q{number}"
            full = next(q.points for q in qs if q.qid == qid)
            assert int(rows[name][qid]) < full and message in sections[qid], (name, qid, sections[qid])
        if name != "handout":
            cells_text = "".join(o.get("text", "") if isinstance(o.get("text"), str) else "".join(o.get("text", []))
                                 for c in executed["cells"] for o in c.get("outputs", []))
            assert "Traceback" not in cells_text
