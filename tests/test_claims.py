"""The claims mechanism: one Chinese line per claim, a ✗ fails a notebook run under the suite."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from batchlab.course import claims

ROOT = Path(__file__).resolve().parents[1]


def test_a_claim_prints_one_line_with_its_numbers(capsys, monkeypatch):
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    assert claims.at_least("连续批处理的 tokens/s 是请求级的 {value} 倍", 1.834, 1.5)
    assert capsys.readouterr().out == "✓ 连续批处理的 tokens/s 是请求级的 1.83 倍（要求 ≥ 1.5）\n"
    assert not claims.between("超出容量的部分约 {value}", 0.40, 0.30, 0.36, hint="看实际发出的速率")
    out = capsys.readouterr().out
    assert out.startswith("✗ 超出容量的部分约 0.4（要求在 0.3 到 0.36 之间）") and "可能的原因：看实际发出的速率" in out
    assert claims.rising("p99 随负载 {value}", [1, 2.5, 7]) and not claims.falling("{value}", [3, 3], strict=True)
    assert claims.falling("{value}", [3, 3], strict=False) and not claims.at_most("{value}", 2, 1)
    assert "1 → 2.5 → 7" in capsys.readouterr().out


def test_a_false_claim_raises_when_strict(monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "strict")
    assert claims.at_least("{value}", 3, 2)
    with pytest.raises(claims.ClaimFailed, match="✗ 吞吐 1 req/s（要求 ≥ 2）"):
        claims.at_least("吞吐 {value} req/s", 1, 2)


def _run_notebooks_under_suite(tmp_path: Path, codes: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict]:
    """One pytest --nbval-lax run of a one-cell notebook per `codes` entry: (the run, {name: outcome})."""
    for name, code in codes.items():
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), tmp_path / f"{name}.ipynb")
    env = {**os.environ, claims.STRICT_ENV: "strict"}  # what tests/conftest.py gives every kernel
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-rA", "-c", os.devnull, "--rootdir", str(tmp_path), *(f"{n}.ipynb" for n in codes)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    outcome = {n: [m.group(1) for m in re.finditer(rf"^(PASSED|FAILED|ERROR) {n}\.ipynb::", proc.stdout, re.M)]
               for n in codes}
    return proc, outcome


@pytest.mark.notebook
def test_a_planted_false_claim_fails_the_notebook_run(tmp_path):
    code = "from batchlab.course import claims\nclaims.at_least('加速比 {value} 倍', MEASURED, 1.5)"
    proc, outcome = _run_notebooks_under_suite(tmp_path, {"bad": code.replace("MEASURED", "1.2"),
                                                          "good": code.replace("MEASURED", "1.8")})
    assert proc.returncode == 1 and "ClaimFailed" in proc.stdout, proc.stdout[-2000:]
    assert outcome == {"bad": ["FAILED"], "good": ["PASSED"]}, proc.stdout[-2000:]


def _stored_lines(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    lines = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            lines += "".join(text).splitlines()
    return lines


@pytest.mark.parametrize("path", sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]),
                         ids=lambda p: p.name)
def test_stored_outputs_hold_no_failed_claim(path):
    failed = [line for line in _stored_lines(path) if line.startswith("✗ ")]
    assert failed == [], f"{path.name} was stored with claims that did not hold: {failed}"
