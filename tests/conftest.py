"""Shared fixtures: one embedded Triton server with the course model repository per test process
(per xdist worker), and the marker rules: notebook cells are marked `notebook`, tests that ask for a
server fixture are marked `server`, and an unmarked test that starts a server fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from xdist.scheduler import LoadScopeScheduling

from batchlab.course.claims import STRICT_ENV
from batchlab.paths import MODEL_REPOSITORY
from batchlab.server import TritonServer, connect
from procs import process_tree, still_running

# A notebook whose run does not show what its prose claims fails (kernels inherit this).
os.environ[STRICT_ENV] = "strict"

TESTS = Path(__file__).resolve().parent
TEST_REPOS = TESTS / "repos"


@pytest.fixture(scope="session")
def triton():
    """The course model repository served by one embedded server for the whole session.

    With TRITON_URL set (an NGC container, or `make start`'s server) that server is used instead.
    """
    with connect() as server:
        yield server


@pytest.fixture()
def echo_repo(tmp_path: Path) -> Path:
    """A private copy of the one-model test repository (`echo`: Y = 2·X)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(TEST_REPOS / "echo", repo / "echo")
    return repo


def stage_models(models: Sequence[str], dest: Path, source: str | os.PathLike[str] | None = None) -> Path:
    """Copy the named model directories into the model repository `dest` and return it.

    Each model comes from `source` if given, else from tests/repos, else from the course's repository.
    """
    dest.mkdir(parents=True, exist_ok=True)
    sources = [Path(source)] if source is not None else [TEST_REPOS, MODEL_REPOSITORY]
    for name in models:
        src = next((s / name for s in sources if (s / name).is_dir()), None)
        if src is None:
            raise FileNotFoundError(f"no model {name!r} in {', '.join(map(str, sources))}")
        shutil.copytree(src, dest / name)
    return dest


@pytest.fixture()
def start_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., TritonServer]]:
    """Factory: stage these models, start a server; every server it made is stopped at teardown.

    ``start_triton(models=None, repo=None, *, start=True, **kw)`` returns a `TritonServer`:
    with `models`, copies of those models (from `repo`, else tests/repos, else the course's
    repository) in a fresh temporary repository; without, `repo` itself (default: the course's).
    `kw` goes to `TritonServer`. With ``start=False`` the server is returned unstarted (for tests
    that expect `start()` to fail) but is still stopped at teardown. Teardown fails the test if a
    server or one of its stubs is still alive afterwards.
    """
    made: list[tuple[TritonServer, list[psutil.Process]]] = []

    def factory(models: Sequence[str] | None = None, repo: str | os.PathLike[str] | None = None, *,
                start: bool = True, **kw: Any) -> TritonServer:
        if models is not None:
            repo = stage_models(models, tmp_path_factory.mktemp("repo"), repo)
        server = TritonServer(repo, **kw)
        entry: tuple[TritonServer, list[psutil.Process]] = (server, [])
        made.append(entry)
        if start:
            server.start()
            entry[1].extend(process_tree(server.pid))
        return server

    yield factory
    with ThreadPoolExecutor() as pool:  # in parallel: each stop waits seconds for the server's stubs
        list(pool.map(lambda entry: entry[0].stop(), made))
    alive = still_running([p for _, procs in made for p in procs], timeout=15)
    assert not any(s.running for s, _ in made) and alive == [], f"servers left running: {alive}"


SERVER_FIXTURES = frozenset({"triton", "start_triton", "echo_repo"})  # echo_repo is staged for a server
HEAVY_FIRST = ({"browser"}, {"notebook", "slow"}, {"server"})
#: Each test here grades a lab's submissions in the sandbox (a minute or more each): they go first,
#: and xdist hands them out one test at a time instead of as one file.
ONE_BY_ONE = ("tests/test_learner_path.py::",)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark nbval's notebook cells `notebook`, and tests that use a server fixture (or the
    repository staged for one) `server`. Then put the files with heavy tests first (browser, then
    notebook and slow, then server), keeping each file's order: xdist hands out whole files in this
    order (`--no-loadscope-reorder`), and the short ones left for the end keep both workers busy
    until the last."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebook)
        elif SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)
    weight: dict[Path, int] = {}
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        rank = next((i for i, m in enumerate(HEAVY_FIRST) if marks & m), len(HEAVY_FIRST))
        rank = -1 if item.nodeid.startswith(ONE_BY_ONE) else rank
        weight[item.path] = min(weight.get(item.path, rank), rank)
    items.sort(key=lambda item: weight[item.path])  # stable: a file's tests keep their order


@pytest.fixture(autouse=True)
def _server_needs_its_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test without the `server` marker that starts an embedded server fails (`make test-fast`
    leaves out `server` tests, so it must know them all)."""
    if request.node.get_closest_marker("server") is None:
        def refuse(self: TritonServer, *args: Any, **kwargs: Any) -> None:
            pytest.fail(f"{request.node.nodeid} starts a Triton server: mark it @pytest.mark.server", pytrace=False)
        monkeypatch.setattr(TritonServer, "_launch", refuse)


class _OneByOne(LoadScopeScheduling):
    """xdist's loadscope (one file, one notebook per worker at a time), except the `ONE_BY_ONE` tests."""

    def _split_scope(self, nodeid: str) -> str:
        return nodeid if nodeid.startswith(ONE_BY_ONE) else super()._split_scope(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    """`make test`'s scheduler (`--dist loadscope`); any other `--dist` keeps xdist's own."""
    return _OneByOne(config, log) if config.getoption("dist") == "loadscope" else None


def pytest_report_header(config):
    url = os.environ.get("TRITON_URL")
    return f"triton: {'external server at ' + url if url else 'embedded tritonserver from nvidia-pytriton'}"
