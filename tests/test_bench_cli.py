"""`python -m batchlab.bench`: bad usage is one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from batchlab.bench.__main__ import main


@pytest.mark.parametrize("argv, message", [
    ([], "name a benchmark"),
    (["nope"], "invalid choice"),
    (["dynamic", "--rounds", "0"], "--rounds must be >= 1"),
    (["continuous", "--requests", "0"], "--requests must be >= 1"),
    (["client", "--lab-max-rate", "-5"], "--lab-max-rate must be > 0"),
    (["fidelity", "--level-s", "soon"], "invalid float value"),
])
def test_bad_usage_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_missing_model_on_an_external_server_is_named(echo_repo, monkeypatch) -> None:
    from batchlab.server import TritonServer

    with TritonServer(echo_repo) as server:
        env = {"TRITON_URL": server.http_url, "TRITON_GRPC_URL": server.grpc_url,
               "TRITON_METRICS_URL": server.metrics_url, "BATCHLAB_TRITON_KEY": server.key or ""}
        cli = subprocess.run([sys.executable, "-m", "batchlab.bench", "client"], capture_output=True, text=True,
                             timeout=120, env={**__import__("os").environ, **env})
    assert cli.returncode == 2 and cli.stdout == ""
    assert cli.stderr.strip() == "error: the server at TRITON_URL does not serve noop"
