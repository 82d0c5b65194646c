"""The embedded server launcher: start, readiness, clean stop, clear errors, loopback only."""

from __future__ import annotations

import ipaddress
import json
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
from procs import process_tree, still_running

pytestmark = pytest.mark.server

PY = sys.executable


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
    procs = process_tree(server.pid)
    names = {p.name() for p in procs}
    assert "tritonserver" in names and any("stub" in n for n in names), names
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(_echo(httpclient, server.http_client(), x), 2 * x)
    np.testing.assert_array_equal(_echo(grpcclient, server.grpc_client(), x), 2 * x)
    assert server.http_client().is_model_ready("echo")
    server.stop()
    assert not server.running
    assert still_running(procs, 5) == []


def test_listens_on_loopback_only(start_triton) -> None:
    server = start_triton(["echo"])
    socks = _listening({p.pid for p in process_tree(server.pid)})
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
        procs = process_tree(proc.pid)[1:]
        assert any(p.name() == "tritonserver" for p in procs)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert still_running(procs, 5) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_check_exits_zero(echo_repo: Path) -> None:
    cli = subprocess.run([PY, "-m", "batchlab.server", "--repo", str(echo_repo), "--check"],
                         capture_output=True, text=True, timeout=90)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["models"] == ["echo"]


def test_parent_killed_takes_server_along(echo_repo: Path) -> None:
    code = (
        "import sys, time; from batchlab.server import TritonServer\n"
        f"s = TritonServer({str(echo_repo)!r}).start()\n"
        "print(s.pid, flush=True); time.sleep(600)\n"
    )
    parent = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(parent.stdout.readline())
        procs = process_tree(server_pid)
        assert len(procs) >= 2  # tritonserver and its stub
        parent.kill()  # SIGKILL: no atexit, no finally
        parent.wait(timeout=10)
        assert still_running(procs, 15) == [], "server or stub outlived its killed parent"
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


# --------------------------------------------------------------------------- lifecycle defects (issue 18)


SLEEPY = '''
import time
class TritonPythonModel:
    def initialize(self, args):
        time.sleep(120)  # a model that takes its time to load: the server stays in startup
    def execute(self, requests):
        return []
'''


def _sleepy_repo(echo_repo: Path) -> Path:
    model = echo_repo / "sleepy"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text((echo_repo / "echo" / "config.pbtxt").read_text())
    (model / "1" / "model.py").write_text(SLEEPY)
    return echo_repo


def _wait_for_stub(pid: int, timeout: float = 60.0) -> list[psutil.Process]:
    """The process tree under `pid` once a Python stub runs in it (the server is loading models)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = process_tree(pid)[1:]
        if any("stub" in p.name() for p in procs if p.is_running()):
            return procs
        time.sleep(0.2)
    raise AssertionError("no Python stub appeared")


def test_sigterm_during_startup_stops_cleanly(echo_repo: Path) -> None:
    repo = _sleepy_repo(echo_repo)
    proc = subprocess.Popen([PY, "-m", "batchlab.server", "--repo", str(repo), "--timeout", "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        procs = _wait_for_stub(proc.pid)
        server = next(p for p in procs if p.name() == "tritonserver")
        workdir = Path(server.cwd())
        regions = list(Path("/dev/shm").glob(f"batchlab_{proc.pid}_*"))
        assert workdir.is_dir() and regions
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=40)   # not the 300-s startup timeout
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert out == "" and "interrupted by SIGTERM during startup" in err and "Traceback" not in err
        assert still_running(procs, 5) == []
        assert not workdir.exists() and not any(r.exists() for r in regions)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_fixed_port_held_by_another_triton_is_named(start_triton, monkeypatch: pytest.MonkeyPatch) -> None:
    """The port check passes (a race: the other server bound just after it); the readiness check
    then finds that the server answering is not ours, instead of reporting "ready"."""
    first = start_triton(["echo"])
    port = first.ports["http"]
    monkeypatch.setattr(srv, "check_port_free", lambda *a, **k: None)
    second = start_triton(["echo"], http_port=port, start=False)
    with pytest.raises(PortInUseError, match=f"http port {port} on 127.0.0.1 is already in use by another Triton server"):
        second.start()
    assert not second.running and first.running
    assert first.http_client().get_model_repository_index()


def test_restart_on_the_same_fixed_ports_works_at_once(echo_repo: Path, start_triton) -> None:
    ports = {"http_port": srv.free_port(), "grpc_port": srv.free_port(), "metrics_port": srv.free_port()}
    server = start_triton(repo=echo_repo, **ports)
    for _ in range(20):  # connections the server closes leave its port in TIME_WAIT
        srv._http("GET", f"http://{server.http_url}/v2/health/ready")
    server.stop()
    again = start_triton(repo=echo_repo, **ports)
    assert again.running and again.ports["http"] == ports["http_port"]


def test_the_server_outlives_the_thread_that_started_it(echo_repo: Path) -> None:
    code = (
        "import threading, time; import numpy as np, tritonclient.http as h\n"
        "from batchlab.server import TritonServer\n"
        f"box = []\n"
        f"t = threading.Thread(target=lambda: box.append(TritonServer({str(echo_repo)!r}).start())); t.start(); t.join()\n"
        "time.sleep(2); s = box[0]\n"
        "i = h.InferInput('X', [1, 4], 'FP32'); i.set_data_from_numpy(np.ones((1, 4), np.float32))\n"
        "y = s.http_client().infer('echo', [i]).as_numpy('Y')\n"
        "print(s.pid, s.running, float(y.sum()), flush=True); time.sleep(600)\n"
    )
    parent = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid, running, total = parent.stdout.readline().split()
        assert running == "True" and float(total) == 8.0
        procs = process_tree(int(pid))
        assert len(procs) >= 2
        parent.kill()  # ... and it dies with the process
        parent.wait(timeout=10)
        assert still_running(procs, 15) == [], "server or stub outlived its killed process"
    finally:
        if parent.poll() is None:
            parent.kill()


def _rss_anon_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon")


def _shm_bytes(server) -> int:
    """Memory the server's shared-memory regions hold now (allocated blocks, not their sizes)."""
    return sum(path.stat().st_blocks * 512 for path in server.shm_regions())


def test_a_request_over_the_limit_is_refused_and_costs_nothing(start_triton) -> None:
    server = start_triton(["noop"])
    big = np.ones((1, 200 * 2**20 // 4), np.float32)  # 200 MiB, as in the issue

    def request(mod, data):
        inp = mod.InferInput("INPUT0", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        return [inp]

    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    small = np.arange(16, dtype=np.float32)[None, :]
    server.http_client().infer("noop", request(httpclient, small))  # regions and buffers warmed up
    shm0, anon0 = _shm_bytes(server), _rss_anon_mib(server.pid)
    # The course's clients refuse before sending anything.
    for client, mod in ((server.http_client(), httpclient), (server.grpc_client(), grpcclient)):
        with pytest.raises(ValueError, match=r"200\.0 MiB is over the course server's limit of 16 MiB .*MAX_REQUEST_BYTES"):
            client.infer("noop", request(mod, big))
    # Any other client: the server refuses (its shared memory may not grow past SHM_LIMIT_BYTES) ...
    for client, mod in ((httpclient.InferenceServerClient(server.http_url, network_timeout=120), httpclient),
                        (grpcclient.InferenceServerClient(server.grpc_url), grpcclient)):
        with pytest.raises(InferenceServerException, match="shared memory"):
            client.infer("noop", request(mod, big), client_timeout=120) if mod is grpcclient else \
                client.infer("noop", request(mod, big))
        # ... and gives back what the request cost: no shared memory kept, the heap returned.
        assert _shm_bytes(server) == shm0
        deadline = time.monotonic() + 10  # the server frees the request a moment after it answered
        while _rss_anon_mib(server.pid) >= anon0 + 32 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _rss_anon_mib(server.pid) < anon0 + 32, (mod.__name__, anon0, _rss_anon_mib(server.pid))
    # A request under the limit still goes through, and the regions stay under their cap.
    ok = np.ones((1, 8 * 2**20 // 4), np.float32)
    out = server.grpc_client().infer("noop", request(grpcclient, ok)).as_numpy("OUTPUT0")
    assert out.shape == ok.shape and server.running
    assert all(r.stat().st_size <= srv.SHM_LIMIT_BYTES for r in server.shm_regions())


def test_an_external_server_that_never_answers_fails_early() -> None:
    """Nothing listens at the address: give up after `silent_s`, not after the whole startup timeout."""
    url = f"127.0.0.1:{srv.free_port()}"
    with pytest.raises(TimeoutError, match="Connection refused"):
        srv.wait_until_ready(url, timeout=600.0, silent_s=0.3)
    with pytest.raises(srv.ServerError, match=f"TRITON_URL={url} is not ready"):
        ExternalServer(url, startup_timeout=0.5).start()
