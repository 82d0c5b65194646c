"""Issue 44: the one home of each shared concept behaves as its callers need (polling, notebook reading,
percentiles, getting a server). tests/test_architecture.py checks there is no second home."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from batchlab.paths import NotebookError, read_notebook
from batchlab.server import TritonServer, connect, poll
from batchlab.sim.summary import PERCENTILES, percentile, percentile_summary


def test_poll_returns_the_first_done_result() -> None:
    calls = iter(range(100))
    assert poll(lambda: next(calls), timeout=5, interval=0.0, done=lambda v: v >= 3) == 3


def test_poll_returns_the_last_result_at_the_deadline() -> None:
    calls = iter(range(10**6))
    last = poll(lambda: next(calls), timeout=0.05, interval=0.001, done=lambda v: False)
    assert last > 0 and not poll(lambda: None, timeout=0.0)


def test_a_notebook_is_read_or_named_in_one_line(tmp_path: Path) -> None:
    good = tmp_path / "a.ipynb"
    good.write_text(json.dumps({"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}))
    assert read_notebook(good)["nbformat"] == 4
    for name, text, why in (("b.ipynb", "{ not json", "JSON error at line 1"),
                            ("c.ipynb", json.dumps({"cells": [], "nbformat": 3}), "not an nbformat 4 notebook"),
                            ("d.ipynb", "x" * 100, "larger than")):
        (tmp_path / name).write_text(text)
        with pytest.raises(NotebookError, match=why) as info:
            read_notebook(tmp_path / name, max_bytes=99)
        assert "\n" not in str(info.value) and name in str(info.value)
    with pytest.raises(NotebookError, match="cannot be read"):
        read_notebook(tmp_path / "missing.ipynb")


def test_percentile_skips_non_finite_values_and_scales() -> None:
    x = np.array([1.0, 2.0, 3.0, np.nan, np.inf])
    assert percentile(x, 50, 1e3) == pytest.approx(2000.0)
    assert percentile([], 99) is None and np.isnan(percentile([np.nan], 99, empty=float("nan")))
    summary = percentile_summary(x)
    assert [k for k in summary if k.startswith("p")] == [f"p{q}" for q in PERCENTILES]
    assert summary["p50"] == percentile(x, 50, 1e3)


def test_a_private_server_ignores_triton_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRITON_URL", "127.0.0.1:1")
    assert isinstance(connect(tmp_path, private=True), TritonServer)


def test_a_server_that_owns_its_repository_removes_it_when_stopped(tmp_path: Path) -> None:
    repo = tmp_path / "staged"
    repo.mkdir()
    kept = TritonServer(repo)
    kept.stop()
    assert repo.is_dir()
    connect(repo, private=True, owns_repo=True).stop()   # the one stop policy: what it staged goes too
    assert not repo.exists()
