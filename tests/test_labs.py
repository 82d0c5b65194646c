"""Labs and solutions from one source: sync, structure, and the labgen generator itself.

The notebooks themselves run under nbval (`solutions/` and `labs/` are in pytest's testpaths);
these tests check what nbval cannot: that `labs/` is exactly what `make handout` would write, that
every TODO is tagged and followed by its check, and that every check grades in Chinese.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from batchlab.tools import labgen
from batchlab.labs import load_checks, parse_scores

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
LABS = ROOT / "labs"
LAB_NAMES = [  # fixed by the README
    "lab1_first_pot", "lab2_dynamic_batching", "lab3_sequence_batching",
    "lab4_continuous_batching", "lab5_rush_hour", "lab6_gpu",
]
STUB = re.compile(r'raise NotImplementedError\("TODO（第 (\d+) 题）')
CJK = re.compile(r"[\u4e00-\u9fff]")


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _solutions() -> list[Path]:
    return sorted(SOLUTIONS.glob("lab*.ipynb"))


def _labs() -> list[Path]:
    return sorted(LABS.glob("lab*.ipynb"))


def _lab_number(path: Path) -> int:
    return int(re.match(r"lab(\d+)_", path.name).group(1))


def _called_names(code: str) -> set[str]:
    """Names of the functions called in a cell (IPython magics stripped)."""
    lines = [ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)} | {
        n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}


# --------------------------------------------------------------------------- the repository


@pytest.mark.parametrize("name", LAB_NAMES)
def test_every_lab_has_a_solution_and_a_generated_lab(name: str) -> None:
    assert (SOLUTIONS / f"{name}.ipynb").is_file(), f"solutions/{name}.ipynb is missing"
    assert (LABS / f"{name}.ipynb").is_file(), f"labs/{name}.ipynb is missing: run `make handout`"


def test_labs_are_in_sync_with_solutions() -> None:
    problems = labgen.stale(SOLUTIONS, LABS)
    assert problems == [], "labs/ is out of date, run `make handout`:\n" + "\n".join(problems)


def test_check_labs_cli_agrees() -> None:
    proc = subprocess.run([sys.executable, "-m", "batchlab.tools.labgen", str(SOLUTIONS), str(LABS), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", _labs(), ids=lambda p: p.name)
def test_lab_is_a_valid_notebook_without_outputs(path: Path) -> None:
    nbformat.validate(nbformat.read(path, as_version=4))
    nb = _nb(path)
    for cell in nb["cells"]:
        assert "### BEGIN SOLUTION" not in _src(cell) and "### END SOLUTION" not in _src(cell)
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


@pytest.mark.parametrize("path", _solutions(), ids=lambda p: p.name)
def test_solution_has_answers_and_no_stubs(path: Path) -> None:
    nbformat.validate(nbformat.read(path, as_version=4))
    lab = labgen.make_lab(_nb(path), path.name)
    assert any(q.kind == "code" for q in lab.questions), f"{path.name} has no code question"
    for cell in _nb(path)["cells"]:
        src = _src(cell)
        assert "YOUR CODE HERE" not in src and not STUB.search(src), f"{path.name}: a TODO stub left in a solution"
        assert "raises-exception" not in cell.get("metadata", {}).get("tags", []), \
            f"{path.name}: a solution cell may not be allowed to raise"


@pytest.mark.parametrize("path", _labs(), ids=lambda p: p.name)
def test_every_todo_is_tagged_and_followed_by_its_check(path: Path) -> None:
    registry = load_checks()
    by_name = {info["function"].__name__: qid for qid, info in registry.items()}
    lab_no = _lab_number(path)
    cells = _nb(path)["cells"]
    todos = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and STUB.search(_src(c))]
    assert todos, f"{path.name} has no TODO cell"
    for k, i in enumerate(todos):
        cell = cells[i]
        number = int(STUB.search(_src(cell)).group(1))
        assert "raises-exception" in cell["metadata"].get("tags", []), f"{path.name} TODO {number} is not tagged"
        end = todos[k + 1] if k + 1 < len(todos) else len(cells)
        called = set()
        for c in cells[i + 1:end]:
            if c["cell_type"] == "code":
                called |= {by_name[n] for n in _called_names(_src(c)) if n in by_name}
        assert f"lab{lab_no}.q{number}" in called, (
            f"{path.name}: TODO 第 {number} 题 is not followed (before the next TODO) by its check "
            f"lab{lab_no}.q{number}; checks called there: {sorted(called) or 'none'}")
    tagged = [i for i, c in enumerate(cells) if "raises-exception" in c.get("metadata", {}).get("tags", [])]
    assert tagged == todos, f"{path.name}: only TODO cells may be tagged raises-exception"


@pytest.mark.parametrize("path", _solutions(), ids=lambda p: p.name)
def test_stored_solution_earns_full_marks(path: Path) -> None:
    """The executed solution's check cells printed full scores for every check the lab calls."""
    nb = _nb(path)
    text = "\n".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                     for o in c.get("outputs", []))
    scores = parse_scores(text)
    lab_no = _lab_number(path)
    n_code = sum(1 for q in labgen.make_lab(nb, path.name).questions if q.kind == "code")
    assert len([q for q in scores if q.startswith(f"lab{lab_no}.")]) == n_code, \
        f"{path.name}: stored outputs show {sorted(scores)}; execute it (make execute NB=...)"
    assert all(s == m for s, m in scores.values()), f"{path.name}: not full marks: {scores}"


def test_every_check_is_reachable_from_a_lab_and_has_a_valid_id() -> None:
    registry = load_checks()
    used = set()
    for path in _labs():
        for c in _nb(path)["cells"]:
            if c["cell_type"] == "code" and "check_" in _src(c):
                used |= {n for n in _called_names(_src(c)) if n.startswith("check_")}
    for qid, info in registry.items():
        assert re.fullmatch(r"lab[1-6]\.q\d+", qid)
        assert info["function"].__name__ in used, f"check {qid} ({info['function'].__name__}) is used by no lab"


def test_every_check_reports_unfinished_work_in_chinese_with_a_score_line(capsys) -> None:
    def todo(*args, **kwargs):
        raise NotImplementedError("TODO（第 1 题）")

    for qid, info in load_checks().items():
        for answer in (None, todo):
            result = info["function"](answer)
            out = capsys.readouterr().out
            assert result.score == 0 and result.pending, (qid, out)
            assert f"[score] {qid} 0/{info['points']}" in out
            assert "尚未完成" in out and CJK.search(out)


def test_an_async_answer_is_named_not_left_unawaited(capsys, recwarn) -> None:
    from batchlab.labs.lab4 import check_eta

    async def eta(n, p):
        return sum(n) / (sum(n) + sum(p))

    result = check_eta(eta)
    out = capsys.readouterr().out
    assert result.score == 0 and not result.pending and "async def" in out and "Traceback" not in out
    assert not [w for w in recwarn if "never awaited" in str(w.message)], "the coroutine was left unawaited"


# --------------------------------------------------------------------------- labgen itself


def _sol_nb(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


def _code(src: str, **meta) -> dict:
    return {"cell_type": "code", "id": f"c{abs(hash(src)) % 10**8}", "metadata": meta, "source": src,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "x"}], "execution_count": 3}


def test_code_region_becomes_an_indented_stub() -> None:
    src = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION 算出 x 的平方\n    return x * x\n    ### END SOLUTION\n"
    lab = labgen.make_lab(_sol_nb({"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# T"}, _code(src)),
                          "lab9_x.ipynb")
    cell = lab.notebook["cells"][2]
    text = "".join(cell["source"])
    assert "    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError(" in text
    assert "TODO（第 1 题）：算出 x 的平方" in text and "not yet implemented" in text
    assert "return x * x" not in text
    assert cell["metadata"]["tags"] == ["raises-exception"]
    assert cell["outputs"] == [] and cell["execution_count"] is None
    assert lab.notebook["cells"][1]["id"] == labgen.BANNER_ID
    compile(text, "cell", "exec")  # the stub is valid Python


def test_markdown_answer_and_question_numbering() -> None:
    md = {"cell_type": "markdown", "id": "m", "metadata": {},
          "source": "问：为什么？\n\n### BEGIN SOLUTION\n因为带宽。\n### END SOLUTION\n"}
    lab = labgen.make_lab(_sol_nb(_code("a = 1\n### BEGIN SOLUTION\na = 2\n### END SOLUTION"), md,
                                  _code("### BEGIN SOLUTION\nb = 3\n### END SOLUTION")), "lab9_x.ipynb")
    assert [(q.number, q.kind) for q in lab.questions] == [(1, "code"), (2, "markdown"), (3, "code")]
    md_out = "".join(lab.notebook["cells"][2]["source"])
    assert "因为带宽" not in md_out and labgen.MARKDOWN_STUB in md_out
    assert "tags" not in lab.notebook["cells"][2]["metadata"]
    assert "第 3 题" in "".join(lab.notebook["cells"][3]["source"])


@pytest.mark.parametrize("src, message", [
    ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
    ("x = 1\n### END SOLUTION\n", "without a BEGIN"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside another"),
])
def test_malformed_markers_are_named(src: str, message: str) -> None:
    with pytest.raises(labgen.LabgenError, match=message):
        labgen.make_lab(_sol_nb(_code(src)), "lab9_x.ipynb")


@pytest.mark.slow
def test_generation_is_deterministic_and_check_detects_drift(tmp_path: Path, capsys) -> None:
    sol, labs = tmp_path / "solutions", tmp_path / "labs"
    sol.mkdir()
    (sol / "lab9_x.ipynb").write_text(labgen.dumps(_sol_nb(_code("### BEGIN SOLUTION\nx = 1\n### END SOLUTION"))))

    def run(*a: str) -> subprocess.CompletedProcess:  # in process; the CLI's subprocess runs have their own tests
        code = labgen.main([str(sol), str(labs), *a])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(a, code, out.out, out.err)
    assert run("--check").returncode == 1  # missing
    assert run().returncode == 0
    assert run("--check").returncode == 1 and "--annotate" in run("--check").stderr  # no nbgrader metadata yet
    assert run("--annotate").returncode == 0
    first = (labs / "lab9_x.ipynb").read_text()
    assert run().returncode == 0 and (labs / "lab9_x.ipynb").read_text() == first
    assert run("--check").returncode == 0
    # trailing whitespace is ignored, anything else is drift
    (labs / "lab9_x.ipynb").write_text(first.replace("\n", "  \n"))
    assert run("--check").returncode == 0
    (labs / "lab9_x.ipynb").write_text(first.replace("YOUR CODE HERE", "my answer"))
    proc = run("--check")
    assert proc.returncode == 1 and "lab9_x.ipynb (differs" in proc.stderr
    # a lab without a solution is stale too; `make handout` removes a generated orphan
    (labs / "lab8_old.ipynb").write_text(first)
    assert "no solution of that name" in run("--check").stderr
    assert run().returncode == 0 and not (labs / "lab8_old.ipynb").exists()


def test_bad_solutions_folder_is_one_line_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "batchlab.tools.labgen", str(tmp_path / "nope"), str(tmp_path / "labs")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and len(proc.stderr.splitlines()) == 1


# --------------------------------------------------------------------------- labkit


def test_needs_attempt_and_ready_stop_cleanly_naming_the_question(capsys) -> None:
    from batchlab.labs import labkit
    from batchlab.labs.lab4 import check_eta

    def stub(*a):
        raise NotImplementedError("TODO（第 3 题）：x — not yet implemented")

    check_eta(stub)                                        # question 3 (lab4.q3) not written yet
    capsys.readouterr()
    assert labkit.attempt(3, lambda: 3) is None and "第 3 题还没完成" in capsys.readouterr().out
    check_eta(lambda n, p: sum(p) / (sum(n) + sum(p)))     # written, wrong
    capsys.readouterr()
    assert labkit.needs(3) is False and "先把第 3 题改对" in capsys.readouterr().out
    assert labkit.ready(3, 1.0) is False
    capsys.readouterr()
    check_eta(lambda n, p: sum(n) / (sum(n) + sum(p)))     # right
    capsys.readouterr()
    assert labkit.attempt(3, lambda: 3) == 3 and labkit.ready(3, 1.0) is True
    assert labkit.attempt(3, lambda: {}["x"]) is None      # right, but raises on this cell's inputs
    out = capsys.readouterr().out
    assert "抛出了 KeyError" in out and "Traceback" not in out
    assert labkit.attempt(9, lambda: 3) is None and "先运行第 9 题的检查格" in capsys.readouterr().out
    assert labkit.attempt(4, lambda: 4, requires=(3,)) == 4   # runs question 4's function before its check


def test_solutions_carry_nbgrader_metadata_and_the_release_keeps_it() -> None:
    for path in _solutions():
        assert labgen.metadata_problems(_nb(path), path.name) == [], path.name
        lab = _nb(LABS / path.name)
        grades = [c["metadata"]["nbgrader"] for c in lab["cells"] if c["metadata"].get("nbgrader", {}).get("grade")
                  and c["cell_type"] == "code"]
        assert grades and all(g["locked"] and g["points"] > 0 for g in grades)
        assert all("nbgrader" in c["metadata"] for c in lab["cells"])
        answers = [c for c in lab["cells"] if c["metadata"]["nbgrader"].get("solution") and c["cell_type"] == "code"]
        assert answers and all(STUB.search(_src(c)) for c in answers)


def test_release_links_resolve_without_the_solutions() -> None:
    link = re.compile(r"\]\(([^)#:]+\.ipynb)(?:#[^)]*)?\)")
    for path in _labs():
        text = "".join(_src(c) for c in _nb(path)["cells"] if c["cell_type"] == "markdown")
        for target in link.findall(text):
            dest = (path.parent / target).resolve()
            assert dest.is_file() and "solutions" not in dest.parts, (path.name, target)
        assert "solutions/" not in json.dumps(_nb(path), ensure_ascii=False), path.name


@pytest.mark.slow
def test_nbgrader_generates_the_same_release(tmp_path: Path) -> None:
    """nbgrader's own generate_assignment reads the solutions' metadata and stubs the same cells."""
    pytest.importorskip("nbgrader")
    (tmp_path / "source" / "lab2").mkdir(parents=True)
    src = SOLUTIONS / "lab2_dynamic_batching.ipynb"
    (tmp_path / "source" / "lab2" / src.name).write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.db_assignments = [dict(name="lab2")]\n')
    env = {**__import__("os").environ, "PATH": f"{Path(sys.executable).parent}:{__import__('os').environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "lab2", "--force"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = _nb(tmp_path / "release" / "lab2" / src.name)
    ours = _nb(LABS / src.name)
    ids = lambda nb, key: [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"]
                           if c["metadata"].get("nbgrader", {}).get(key)]
    assert ids(theirs, "grade") == ids(ours, "grade") and ids(theirs, "solution") == ids(ours, "solution")
    for cell in theirs["cells"]:
        assert "### BEGIN SOLUTION" not in _src(cell)


def test_workspace_files_without_a_server(tmp_path: Path) -> None:
    from batchlab.config_pbtxt import ConfigError, edit_config, parse_config
    from batchlab.labs import labkit

    ws = labkit.workspace(["embed"], root=tmp_path)
    try:
        ws.add("embed", as_name="embed_copy")
        assert ws.models == ["embed", "embed_copy"]
        assert 'name: "embed_copy"' in ws.read_config("embed_copy")
        assert "# 模型名" in ws.read_config("embed_copy")  # the course's comments are copied too
        ws.write_config("embed_copy", edit_config(ws.read_config("embed_copy"), {"max_batch_size": 4}))
        assert parse_config(ws.read_config("embed_copy")).max_batch_size == 4
        with pytest.raises(ConfigError):
            ws.write_config("embed", "dynamic_batching { max_batch_size: 8 }")
        with pytest.raises(ValueError, match="no model"):
            ws.add("no_such_model")
        with pytest.raises(ValueError, match="def"):
            ws.install("embed", "admit", lambda w, a, m, b: [])
        with pytest.raises(ValueError, match="unknown hook"):
            ws.install("embed", "evict", len)
    finally:
        ws.close()
    assert not ws.dir.exists()


def _admit_using_np(waiting, active, max_active, kv_token_budget):
    """Reads `np` from this module: in the model's own file there is no such name."""
    return list(np.flatnonzero(np.arange(len(waiting)) < max_active - len(active)))


def test_install_runs_the_copied_function_once_and_says_what_is_wrong(tmp_path: Path) -> None:
    from batchlab.labs import labkit

    ws = labkit.workspace([], root=tmp_path)
    try:
        folder = ws.add("lm_stream", as_name="lm_mine")
        with pytest.raises(labkit.HookError, match="用到了函数外面的名字 np.*import") as err:
            ws.install("lm_mine", "admit", _admit_using_np)
        assert "Traceback" not in str(err.value)
        assert not (folder / "1" / "policy.py").exists()    # nothing half installed
        assert ws.install("lm_mine", "admit", _admit_two).is_file()
        alone = labkit.isolated(_admit_using_np)            # what the lab's checks call
        with pytest.raises(NameError):
            alone([], [], 8, 4096)
        assert labkit.isolated(_admit_two)([None] * 3, [], 8, 4096) == [0, 1]
    finally:
        ws.close()


def _newest_first(remaining, n_decoding, max_num_tokens):
    """A lab's split (self-contained): the room goes to the newest prompt first."""
    room, out = max_num_tokens - n_decoding, []
    for left in reversed(remaining):
        out.append(max(0, min(left, room)))
        room -= out[-1]
    return out[::-1]


def _admit_two(waiting, active, max_active, kv_token_budget):
    """A lab's admission (self-contained): at most two running."""
    return list(range(min(len(waiting), max(0, 2 - len(active)))))


def test_installed_hooks_run_in_the_lm_stream_copy(tmp_path: Path) -> None:
    import importlib.util

    import numpy as np

    import fake_pb  # tests/fake_pb.py
    from batchlab.config_pbtxt import edit_config
    from batchlab.labs import labkit
    from batchlab.lm import ToyLM, encode, generate

    ws = labkit.workspace([], root=tmp_path)
    try:
        folder = ws.add("lm_stream", as_name="lm_mine")
        ws.write_config("lm_mine", edit_config(ws.read_config("lm_mine"), {"parameters": {
            "max_num_tokens": 'string_value: "8"', "step_policy": 'string_value: "chunked"'}}))
        assert ws.install("lm_mine", "prefill_chunks", _newest_first) == folder / "1" / "chunks.py"
        assert ws.install("lm_mine", "admit", _admit_two) == folder / "1" / "policy.py"
        assert "prefill_chunks = _newest_first" in (folder / "1" / "chunks.py").read_text(encoding="utf-8")
        with fake_pb.installed():
            spec = importlib.util.spec_from_file_location("lab_lm_mine", folder / "1" / "model.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            model = module.TritonPythonModel()
            model.initialize(fake_pb.init_args(folder))
            try:
                scheduler = model.batcher.scheduler
                assert scheduler.prefill_split([5, 10], 2, 8) == [0, 6]   # the lab's rule, not the library's
                assert scheduler.admission.select([None] * 3, []) == [0, 1]
                assert type(scheduler.admission.base).__name__ == "ReserveAdmission"   # the config's policy
                jobs = [(encode("hello world"), 3), (encode("the hot pot is ready for everyone"), 4)]
                reqs = [fake_pb.Request({"PROMPT": np.asarray(p, np.int32), "MAX_TOKENS": np.array([m], np.int32),
                                         "IGNORE_EOS": np.array([True])}) for p, m in jobs]
                model.execute(reqs)
                lm = ToyLM.default()
                for r, (p, m) in zip(reqs, jobs):
                    assert r.sender.wait_final(30)
                    assert [x.output("TOKEN").item() for x in r.sender.responses()] == generate(lm, p, m, ignore_eos=True)
            finally:
                model.finalize()
    finally:
        ws.close()


def _accept_all_matches(draft_tokens, target_argmax):
    """A lab's wrong acceptance rule (self-contained): counts every matching position, past the first mismatch."""
    accepted = sum(d == t for d, t in zip(draft_tokens, target_argmax))
    return accepted, target_argmax[accepted]


def _accept_prefix(draft_tokens, target_argmax):
    """A lab's right acceptance rule (self-contained)."""
    accepted = 0
    while accepted < len(draft_tokens) and draft_tokens[accepted] == target_argmax[accepted]:
        accepted += 1
    return accepted, target_argmax[accepted]


def test_the_installed_accept_rule_verifies_the_drafts(tmp_path: Path) -> None:
    """The lab's `accept` is the rule the speculative copy verifies with: the right one keeps greedy
    decoding's tokens, one accepting past the first mismatch changes them."""
    import importlib.util

    import fake_pb  # tests/fake_pb.py
    from batchlab.labs import labkit
    from batchlab.lm import ToyLM, encode, generate

    lm = ToyLM.default()
    jobs = [(encode("hello world hello world"), 24), (encode("the hot pot is ready for everyone"), 20)]
    ws = labkit.workspace([], root=tmp_path)
    try:
        folder = ws.add("lm_stream", as_name="lm_spec")
        ws.set_parameters("lm_spec", {"speculative_method": "ngram_bigram", "num_speculative_tokens": 3})
        got = {}
        for rule in (_accept_prefix, _accept_all_matches):
            assert ws.install("lm_spec", "accept", rule) == folder / "1" / "accept.py"
            with fake_pb.installed():
                spec = importlib.util.spec_from_file_location(f"lab_spec_{rule.__name__}", folder / "1" / "model.py")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                model = module.TritonPythonModel()
                model.initialize(fake_pb.init_args(folder))
                try:
                    assert model.batcher.accept([5, 6, 7], [5, 8, 7, 4]) == rule([5, 6, 7], [5, 8, 7, 4])
                    reqs = [fake_pb.Request({"PROMPT": np.asarray(p, np.int32), "MAX_TOKENS": np.array([m], np.int32),
                                             "IGNORE_EOS": np.array([True])}) for p, m in jobs]
                    model.execute(reqs)
                    for r in reqs:
                        assert r.sender.wait_final(30)
                    got[rule] = [[x.output("TOKEN").item() for x in r.sender.responses()] for r in reqs]
                finally:
                    model.finalize()
        greedy = [generate(lm, p, m, ignore_eos=True) for p, m in jobs]
        assert got[_accept_prefix] == greedy and got[_accept_all_matches] != greedy
    finally:
        ws.close()


def test_named_workspace_replaces_the_previous_one(tmp_path: Path) -> None:
    from batchlab.labs import labkit

    first = labkit.workspace(["noop"], name="t", root=tmp_path)
    second = labkit.workspace(["noop"], name="t", root=tmp_path)
    try:
        assert not first.dir.exists() and second.dir.exists()
    finally:
        second.close()


@pytest.mark.server
def test_workspace_reload_and_refused_config() -> None:
    from batchlab.config_pbtxt import edit_config
    from batchlab.labs import labkit
    from batchlab.server import ModelLoadError

    with labkit.workspace(["embed"]) as ws:
        server = ws.start()
        text = edit_config(ws.read_config("embed"), "dynamic_batching { max_queue_delay_microseconds: 1234 }")
        ws.write_config("embed", text)
        ws.reload("embed")
        cfg = server.http_client().get_model_config("embed")
        assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 1234
        bad = edit_config(text, "dynamic_batching { preferred_batch_size: [ 64 ] }")
        ws.write_config("embed", bad)  # parses, but Triton refuses 64 > max_batch_size
        with pytest.raises(ModelLoadError, match="拒绝加载.*embed"):
            ws.reload("embed")
    assert not server.running


def test_scores_cli_collects_the_solutions_full_marks() -> None:
    paths = [str(p) for p in _solutions()]
    proc = subprocess.run([sys.executable, "-m", "batchlab.labs", "scores", "--json", *paths],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for path, scores in data.items():
        assert scores and all(s == m for s, m in scores.values()), (path, scores)
    bad = subprocess.run([sys.executable, "-m", "batchlab.labs", "scores", "nope.ipynb"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


def test_workspace_of_a_dead_kernel_is_swept(tmp_path: Path) -> None:
    from batchlab.labs import labkit

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / "batchlab-lab-stale"
    (stale / "models").mkdir(parents=True)
    (stale / "owner.pid").write_text(dead.stdout.strip())
    ws = labkit.workspace(["noop"], root=tmp_path)
    try:
        assert not stale.exists() and ws.dir.exists()
    finally:
        ws.close()
