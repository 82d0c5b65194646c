"""Shared fixtures: one embedded Triton server with the course model repository per test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from batchlab.server import TritonServer, connect

TESTS = Path(__file__).resolve().parent
TEST_REPOS = TESTS / "repos"


@pytest.fixture(scope="session")
def triton():
    """The course model repository served by one embedded server for the whole session.

    With TRITON_URL set (an NGC container, or `make start`'s server) that server is used instead.
    """
    with connect(startup_timeout=180) as server:
        yield server


@pytest.fixture()
def echo_repo(tmp_path: Path) -> Path:
    """A private copy of the one-model test repository (`echo`: Y = 2·X)."""
    import shutil

    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(TEST_REPOS / "echo", repo / "echo")
    return repo


def pytest_report_header(config):
    url = os.environ.get("TRITON_URL")
    return f"triton: {'external server at ' + url if url else 'embedded tritonserver from nvidia-pytriton'}"
