"""The embedded server launcher: start, readiness, clean stop, clear errors, loopback only."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from batchlab import server as srv
from batchlab.server import ExternalServer, ModelLoadError, PortInUseError, connect

pytestmark = pytest.mark.server

PY = sys.executable


def _tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants."""
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _wait_gone(procs: list[psutil.Process], timeout: float = 15.0) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _listening(pids: set[int]) -> list[tuple[str, int]]:
    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    ]


def _is_loopback(ip: str) -> bool:
    """127.0.0.0/8, also as an IPv4-mapped IPv6 address (gRPC listens on ::ffff:127.0.0.1)."""
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback and str(mapped or addr).startswith("127.")


def _echo(client_mod, client, x: np.ndarray) -> np.ndarray:
    inp = client_mod.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer("echo", [inp]).as_numpy("Y")


def test_start_infer_stop_leaves_nothing(start_triton) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    server = start_triton(["echo"])
    assert server.running and server.models == ["echo"]
    procs = _tree(server.pid)
    names = {p.name() for p in procs}
    assert "tritonserver" in names and any("stub" in n for n in names), names
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(_echo(httpclient, server.http_client(), x), 2 * x)
    np.testing.assert_array_equal(_echo(grpcclient, server.grpc_client(), x), 2 * x)
    assert server.http_client().is_model_ready("echo")
    server.stop()
    assert not server.running
    assert _wait_gone(procs, 5) == []


def test_listens_on_loopback_only(start_triton) -> None:
    server = start_triton(["echo"])
    socks = _listening({p.pid for p in _tree(server.pid)})
    ports = {port for _, port in socks}
    assert set(server.ports.values()) <= ports
    assert socks and all(_is_loopback(ip) for ip, _ in socks), socks
    # An address of this host that is not loopback must refuse the connection.
    others = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
              if a.family == socket.AF_INET and not a.address.startswith("127.")]
    for ip in others[:2]:
        with pytest.raises(OSError):
            socket.create_connection((ip, server.ports["http"]), timeout=1).close()


def test_port_in_use_is_named(echo_repo: Path, start_triton) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"http port {port} .*already in use"):
            start_triton(repo=echo_repo, http_port=port)
        cli = subprocess.run([PY, "-m", "batchlab.server", "--repo", str(echo_repo), "--check",
                              "--grpc-port", str(port)], capture_output=True, text=True, timeout=60)
        assert cli.returncode == 2
        assert cli.stdout == ""
        assert f"grpc port {port}" in cli.stderr and "already in use" in cli.stderr
        assert "Traceback" not in cli.stderr


def test_port_taken_after_check_is_diagnosed(start_triton, monkeypatch: pytest.MonkeyPatch) -> None:
    """A port taken between our check and the server's bind: the server log is read and named."""
    monkeypatch.setattr(srv, "check_port_free", lambda *a, **k: None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        server = start_triton(["echo"], http_port=port, grpc_port=srv.free_port(), metrics_port=srv.free_port(),
                              start=False)
        with pytest.raises(PortInUseError, match=f"127.0.0.1:{port} is already in use"):
            server.start()
    assert not server.running


@pytest.mark.parametrize(
    "model, expected",
    [
        ("broken_config", r"model 'broken_config'.*config\.pbtxt.*line 5.*no field named \"dynamic_batching\""),
        ("broken_init", r"model 'broken_init' failed to load: .*RuntimeError: weights file missing"),
    ],
)
def test_broken_model_is_named(start_triton, model: str, expected: str) -> None:
    server = start_triton([model], startup_timeout=60, start=False)
    with pytest.raises(ModelLoadError, match=expected) as info:
        server.start()
    assert "last lines of the server log" in str(info.value)
    assert not server.running


def test_cli_prints_json_and_stops_on_sigterm(echo_repo: Path) -> None:
    proc = subprocess.Popen([PY, "-m", "batchlab.server", "--repo", str(echo_repo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        info = json.loads(line)
        assert set(info) == {"http", "grpc", "metrics", "models", "key"} and info["models"] == ["echo"]
        assert len(info["key"]) >= 32
        assert all(info[k].startswith("127.0.0.1:") for k in ("http", "grpc", "metrics"))
        procs = _tree(proc.pid)[1:]
        assert any(p.name() == "tritonserver" for p in procs)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert _wait_gone(procs, 5) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_check_exits_zero_within_60s(echo_repo: Path) -> None:
    t0 = time.monotonic()
    cli = subprocess.run([PY, "-m", "batchlab.server", "--repo", str(echo_repo), "--check"],
                         capture_output=True, text=True, timeout=90)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["models"] == ["echo"]
    assert time.monotonic() - t0 < 60


def test_parent_killed_takes_server_along(echo_repo: Path) -> None:
    code = (
        "import sys, time; from batchlab.server import TritonServer\n"
        f"s = TritonServer({str(echo_repo)!r}).start()\n"
        "print(s.pid, flush=True); time.sleep(600)\n"
    )
    parent = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(parent.stdout.readline())
        procs = _tree(server_pid)
        assert len(procs) >= 2  # tritonserver and its stub
        parent.kill()  # SIGKILL: no atexit, no finally
        parent.wait(timeout=10)
        assert _wait_gone(procs, 15) == [], "server or stub outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_connect_uses_triton_url(start_triton, monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_triton(["echo"])
    monkeypatch.setenv("TRITON_URL", f"http://{server.http_url}")
    monkeypatch.setenv("TRITON_GRPC_URL", server.grpc_url)
    monkeypatch.setenv("TRITON_METRICS_URL", server.metrics_url)
    monkeypatch.delenv(srv.KEY_ENV, raising=False)
    with pytest.raises(srv.ServerError, match=f"restricts its repository API: set {srv.KEY_ENV}"):
        connect().start()
    monkeypatch.setenv(srv.KEY_ENV, server.key)
    with connect() as ext:
        assert isinstance(ext, ExternalServer)
        assert ext.models == ["echo"] and ext.grpc_url == server.grpc_url
        assert ext.grpc_client().is_server_ready()
        assert [m.name for m in ext.grpc_client().get_model_repository_index().models] == ["echo"]
    assert server.running  # leaving the external server's context does not stop it
    monkeypatch.setenv("TRITON_URL", "no-port-here")
    with pytest.raises(ValueError, match="host:port"):
        connect()


def test_bad_repository_is_named(tmp_path: Path, start_triton) -> None:
    with pytest.raises(srv.ServerError, match="does not exist"):
        start_triton(repo=tmp_path / "nope")
    with pytest.raises(srv.ServerError, match="holds no model"):
        start_triton(repo=tmp_path)


def test_stage_models_copies_from_the_test_and_course_repositories(tmp_path: Path) -> None:
    from conftest import stage_models

    repo = stage_models(["echo", "embed"], tmp_path / "repo")
    assert sorted(p.name for p in repo.iterdir()) == ["echo", "embed"]
    assert (repo / "echo" / "config.pbtxt").is_file() and (repo / "embed" / "config.pbtxt").is_file()
    with pytest.raises(FileNotFoundError, match="no model 'nope'"):
        stage_models(["nope"], tmp_path / "other")
