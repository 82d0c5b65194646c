"""Every script under benchmarks/ imports and runs at a tiny size, so a script that breaks fails here.

A new script must be added to TINY (the test that lists the scripts fails until it is)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

#: script -> (arguments of a run that takes a few seconds, needs a real server)
TINY: dict[str, list[tuple[list[str], bool]]] = {
    "bench_lm.py": [(["--repeats", "1", "--no-server"], False),
                    (["--repeats", "1", "--duration", "0.5", "--clients", "2"], True)],
    "bench_sim.py": [(["--requests", "3000", "--simpy-requests", "300", "--repeat", "1", "--json"], False)],
    "bench_speculative.py": [(["--rounds", "1", "--max-tokens", "16", "--prompts-per-round", "1",
                               "--concurrency", "1"], True)],
}


def load_script(name: str) -> ModuleType:
    """Import benchmarks/<name> as a module (not run as __main__)."""
    spec = importlib.util.spec_from_file_location(f"bench_script_{Path(name).stem}", BENCHMARKS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_script_has_a_tiny_run():
    scripts = sorted(p.name for p in BENCHMARKS.glob("*.py"))
    assert scripts, "no benchmark scripts found"
    assert sorted(TINY) == scripts, "add each benchmarks/*.py to TINY with the arguments of a tiny run"


CASES = [pytest.param(name, argv, id=f"{name}-{'server' if server else 'local'}",
                      marks=[pytest.mark.server] if server else [])
         for name, runs in TINY.items() for argv, server in runs]


@pytest.mark.parametrize("name, argv", CASES)
def test_script_runs_at_a_tiny_size(name, argv, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [name, *argv])
    module = load_script(name)
    assert callable(getattr(module, "main", None)), f"{name} has no main(argv)"
    assert module.main(argv) == 0
    out = capsys.readouterr().out
    result = json.loads(out)   # each script prints one JSON object in these runs
    assert isinstance(result, dict) and result
