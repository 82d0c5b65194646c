"""Issue 18: one bad file cannot stop, hang or fool the grading of a class.

Each hostile file gets one line on stderr naming the file and the problem; the good files are
still graded; the run exits 2 and ends quickly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab.quiz import SubmissionError, grade_file, load_bank, seed_for
from batchlab.quiz.safe_json import MAX_SUBMISSION_BYTES, read_json_file

KEY = {q.id: q.expected_ids() for q in load_bank("interview")}


@pytest.fixture
def class_dir(tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "subs"
    d.mkdir()
    files: dict[str, Path] = {}

    def put(name: str, text: str | bytes) -> None:
        p = d / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        files[name] = p

    put("a_good.json", json.dumps({"_learner": "zhang3", **KEY}))
    put("b_deep.json", '{"Q1": ' + "[" * 1000 + "]" * 1000 + "}")
    fifo = d / "c_fifo.json"
    os.mkfifo(fifo)
    files["c_fifo.json"] = fifo
    zero = d / "d_zero.json"
    zero.symlink_to("/dev/zero")
    files["d_zero.json"] = zero
    with (d / "e_huge_id.json").open("w", encoding="utf-8") as fh:   # 100 MB learner id
        fh.write('{"_learner": "')
        chunk = "x" * (1 << 20)
        for _ in range(100):
            fh.write(chunk)
        fh.write('"}')
    files["e_huge_id.json"] = d / "e_huge_id.json"
    put("f_long_id.json", json.dumps({"_learner": "y" * 200_000}))       # under the size cap
    other = seed_for("li4")
    q = load_bank("ch05")["ch05-1"]
    put("g_seed.json", json.dumps({"_bank": "ch05", "_learner": "zhang3", "_seed": other,
                                   "ch05-1": q.expected(other)}))
    put("h_dup.json", '{"_learner": "zhang3", "Q1": "A", "Q1": "B"}')
    (d / "i_dir.json").mkdir()
    files["i_dir.json"] = d / "i_dir.json"
    put("j_latin1.json", '{"_learner": "caf\xe9"}'.encode("latin-1"))
    put("k_bom.json", "\ufeff" + json.dumps({"_learner": "bom", "Q1": "B"}))
    put("l_odd_id.json", json.dumps({"_learner": "=HYPERLINK(\"http://x\")", "Q1": "B"}))
    return files


EXPECT = {
    "b_deep.json": "nested too deeply",
    "c_fifo.json": "not a regular file (a FIFO",
    "d_zero.json": "not a regular file (a character device)",
    "e_huge_id.json": "too large",
    "f_long_id.json": "_learner: a learner id may have at most 64 characters",
    "g_seed.json": "_seed does not match the learner id",
    "h_dup.json": "duplicate key 'Q1'",
    "i_dir.json": "is a directory",
    "j_latin1.json": "not UTF-8 text",
    "l_odd_id.json": "may only use letters",
}


def test_cli_survives_every_bad_file_with_one_line_each(class_dir: dict[str, Path]) -> None:
    files = [str(p) for _, p in sorted(class_dir.items())]
    r = subprocess.run([sys.executable, "-m", "batchlab.quiz", "grade", *files, "--csv",
                        str(Path(files[0]).parent.parent / "class.csv")],
                       capture_output=True, text=True, timeout=60)   # a hang fails here
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = r.stderr.splitlines()
    assert len(err) == len(EXPECT), r.stderr
    for line, (name, problem) in zip(err, sorted(EXPECT.items())):
        assert line.startswith(str(class_dir[name]) + ": "), line
        assert problem in line, line
        assert len(line) < 400                # a huge id is never echoed
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(Path(o["file"]).name, o["score"]) for o in out] == [("a_good.json", 10), ("k_bom.json", 1)]
    csv_text = (Path(files[0]).parent.parent / "class.csv").read_text("utf-8")
    assert len(csv_text) < 10_000 and "y" * 100 not in csv_text


def test_size_cap_and_messages_in_process(class_dir: dict[str, Path]) -> None:
    with pytest.raises(SubmissionError, match=r"e_huge_id\.json: too large: 104,857,6\d\d bytes"):
        grade_file(class_dir["e_huge_id.json"])
    with pytest.raises(ValueError, match="too large"):
        read_json_file(class_dir["f_long_id.json"], max_bytes=1000)
    assert MAX_SUBMISSION_BYTES == 1 << 20


def test_seed_override_without_learner_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"_bank": "ch05", "_seed": 7}), "utf-8")
    with pytest.raises(SubmissionError, match="_seed is not accepted: the numbers derive from _learner alone"):
        grade_file(p)


def test_file_names_with_control_characters_stay_on_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bad\nname.json"
    p.write_text("[", "utf-8")
    r = subprocess.run([sys.executable, "-m", "batchlab.quiz", "grade", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "bad\\x0aname.json" in r.stderr
