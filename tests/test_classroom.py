"""Grading a class: locked checks restored, each submission re-executed in a sandbox, scores decided
in the grader's own process from the check cells' evidence, a gradebook and Chinese feedback.

The end-to-end grading of a class (the solution, the handout, a forger, a learner whose answer cell
raises, a file that is not a notebook) runs with the learner-path submissions of the same lab, in one
grading run: tests/test_learner_path.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.classroom import notebook as cnb
from batchlab.classroom.grade import score_executed
from batchlab.classroom.sandbox import Sandbox, bwrap_args, pick
from batchlab.labs import _core, load_checks
from batchlab.labs._evidence import from_evidence, to_evidence
from batchlab.labs.lab2 import check_best_under_slo, check_dynamic_batching_block
from batchlab.labs.lab4 import check_eta

from lab_solutions import solution_namespace

ROOT = Path(__file__).resolve().parents[1]


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


# --------------------------------------------------------------------------- evidence and replay


def _evidence_of(monkeypatch, call):
    got = []
    monkeypatch.setenv(_core.GRADING_ENV, "1")
    monkeypatch.setattr(_core, "_emit", got.append)
    result = call()
    return result, got[-1]


@pytest.mark.slow
@pytest.mark.parametrize("check, answer", [
    (check_dynamic_batching_block, solution_namespace("lab2")["dynamic_batching_block"]),
    (check_dynamic_batching_block, lambda d, p=(): "dynamic_batching {\n  max_batch_size: 8\n}"),
    (check_best_under_slo, lambda rows, slo: [{"wrong": 1}]),
    (check_eta, solution_namespace("lab4")["eta"]),
    (check_eta, lambda n, p: "0.5"),
    (check_eta, lambda n, p: 1 / 0),
    (check_eta, None),
])
def test_replay_in_another_process_gives_the_kernels_result(monkeypatch, capsys, check, answer) -> None:
    live, evidence = _evidence_of(monkeypatch, lambda: check(answer))
    wire = json.dumps(evidence)              # what travels in the notebook
    code = ("import json, sys; from batchlab.labs import load_checks; from batchlab.labs._core import replay; "
            "load_checks(); r = replay(json.loads(sys.stdin.read())); print(json.dumps([r.score, r.lines]))")
    proc = subprocess.run([sys.executable, "-c", code], input=wire, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [live.score, live.lines]


def test_forged_evidence_raises_nothing(monkeypatch, capsys) -> None:
    load_checks()
    _, evidence = _evidence_of(monkeypatch, lambda: check_eta(None))
    forged = {**evidence, "score": 3, "passed": True, "lines": ["✓ 全对"]}
    assert _core.replay(forged).score == 0
    stub = solution_namespace("lab4")["eta"]
    _, ok = _evidence_of(monkeypatch, lambda: check_eta(stub))
    for bad in ({**ok, "qid": "lab4.q9"}, {**ok, "records": ok["records"][:1]}, {**ok, "v": 0},
                {**ok, "records": ok["records"] + [{"k": "call", "ok": 1}]}, "not json"):
        with pytest.raises(_core.ReplayError):
            _core.replay(bad)


def test_evidence_travels_as_data_only() -> None:
    import numpy as np
    from tritonclient.utils import InferenceServerException

    value = {"a": (1, 2.5, float("nan")), 3: [np.arange(4, dtype=np.int32), np.float32(1.5)], "s": {1, 2},
             "e": InferenceServerException("unexpected shape", status="400"), "f": len, "big": 2 ** 70}
    back = from_evidence(json.loads(json.dumps(to_evidence(value))))
    assert back["a"][:2] == (1, 2.5) and back["a"][2] != back["a"][2]
    assert back[3][0].dtype == np.int32 and back[3][0].tolist() == [0, 1, 2, 3] and isinstance(back[3][1], np.float32)
    assert back["s"] == {1, 2} and back["big"] == 2 ** 70
    assert back["e"].message() == "unexpected shape" and back["e"].status() == "400"
    assert type(back["f"]).__name__ == "builtin_function_or_method" and _core.is_callable(back["f"])
    with pytest.raises(ValueError):
        from_evidence({"__nd__": ["O", [1], [1]]})          # object arrays never travel
    with pytest.raises(ValueError):
        from_evidence({"__pickle__": "gASV"})


# --------------------------------------------------------------------------- rebuilding a submission


def test_rebuild_restores_locked_cells_and_keeps_answers() -> None:
    release = _nb(ROOT / "labs" / "lab2_dynamic_batching.ipynb")
    sub = json.loads(json.dumps(release))
    checks = [c for c in sub["cells"] if cnb.nbgrader(c).get("grade")]
    answers = [c for c in sub["cells"] if cnb.nbgrader(c).get("solution") and c["cell_type"] == "code"]
    checks[0]["source"] = "print('[score] lab2.q1 4/4')"
    checks[0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "[score] lab2.q1 4/4"}]
    answers[0]["source"] = "def dynamic_batching_block(d, p=()):\n    return 'mine'\n"
    sub["cells"].remove(checks[1])                                   # a deleted check
    checks[2]["id"] = "renamed"                                      # a re-labelled check
    sub["cells"].insert(3, {"cell_type": "code", "id": "x", "metadata": {}, "source": "x = 1", "outputs": [],
                            "execution_count": None})
    built = cnb.rebuild(release, sub)
    by_id = {c["id"]: c for c in built["cells"]}
    for c in release["cells"]:
        if not cnb.nbgrader(c).get("solution"):
            assert _src(by_id[c["id"]]) == _src(c), c["id"]
    assert _src(by_id[answers[0]["id"]]).endswith("return 'mine'\n")
    assert all(c.get("outputs", []) == [] for c in built["cells"])
    assert [c["id"] for c in built["cells"] if c["id"] in {x["id"] for x in release["cells"]}] == \
        [c["id"] for c in release["cells"]]
    assert any(c["id"].startswith("learner-") and _src(c) == "x = 1" for c in built["cells"])
    assert sum(1 for c in built["cells"] if _src(c) == _src(checks[2])) == 2  # the copy runs, but as the learner's


def test_questions_of_every_release() -> None:
    registry = load_checks()
    for path in sorted((ROOT / "labs").glob("lab*.ipynb")):
        qs = cnb.questions(_nb(path))
        lab = path.name.split("_")[0]
        assert qs and {q.qid for q in qs} == {k for k in registry if k.startswith(lab + ".")}, path.name
        assert all(q.points == registry[q.qid]["points"] and q.answer_cells for q in qs)


def test_score_executed_names_what_went_wrong() -> None:
    load_checks()
    q = cnb.GradedQuestion("lab4.q2", 3, "chk", ["ans"])
    raised = {"cells": [{"id": "ans", "outputs": [{"output_type": "error", "ename": "ValueError", "evalue": "boom"}]},
                        {"id": "chk", "outputs": []}]}
    (s,) = score_executed(raised, [q])
    assert s.score == 0 and "ValueError: boom" in s.lines[0]
    missing = {"cells": [{"id": "ans", "outputs": []}, {"id": "chk", "outputs": []}],
               "metadata": {"batchlab_execution": {"reason": "memory: more than 3072 MiB"}}}
    (s,) = score_executed(missing, [q])
    assert s.score == 0 and "memory" in s.lines[0]


# --------------------------------------------------------------------------- the sandbox


def test_bwrap_mounts_nothing_of_the_home_but_python(tmp_path: Path) -> None:
    args = bwrap_args(tmp_path)
    binds = [args[i + 1] for i, a in enumerate(args) if a in ("--bind", "--ro-bind")]
    writable = [args[i + 1] for i, a in enumerate(args) if a == "--bind"]
    assert writable == [str(tmp_path.resolve())]
    assert "/" not in binds and str(Path.home()) not in binds and "--unshare-all" in args and "--clearenv" in args
    docker = Sandbox("docker", "course:latest").argv(tmp_path, ["-m", "x"])
    assert "--network" in docker and "none" in docker and f"{tmp_path.resolve()}:/grading" in docker


@pytest.mark.slow
def test_sandbox_cannot_read_the_home_or_other_submissions(tmp_path: Path) -> None:
    try:
        box = pick("bwrap")
    except Exception as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    from batchlab.classroom.sandbox import run

    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.txt").write_text("answers")
    mine = tmp_path / "mine"
    mine.mkdir()
    probe = ("import os, socket; home = os.path.expanduser('~');"
             f"print(os.path.exists({str(other / 'secret.txt')!r}), os.path.exists({str(Path.home() / '.bashrc')!r}),"
             " os.access('/usr', os.W_OK), sorted(os.environ)[:3]);"
             "s = socket.socket(); s.settimeout(2);"
             "print(s.connect_ex(('1.1.1.1', 53)) != 0)")
    code, out = run(box, mine, ["-c", probe], 60)
    assert code == 0, out
    first, second = out.strip().splitlines()[-2:]
    assert first.startswith("False False False") and second == "True"
