"""One host, many users: the embedded server's restricted APIs, its key, its private files.

Each test plays a second local user (a client without the key) against a learner's server, or
checks what `ps` and the file system show to other users.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from batchlab import server as srv

pytestmark = pytest.mark.server

PY = sys.executable


def _echo_ok(server: srv.TritonServer) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = httpclient.InferInput("X", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(httpclient.InferenceServerClient(server.http_url).infer("echo", [inp]).as_numpy("Y"), 2 * x)


def _refused(call, grpc: bool) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    exc = info.value
    if grpc:
        assert "UNAVAILABLE" in str(exc.status()) and "restricted" in exc.message(), (exc.status(), exc.message())
    else:
        assert exc.status() == "403" and "restricted" in exc.message(), (exc.status(), exc.message())
    return exc.message()


def test_a_client_without_the_key_is_refused_and_the_server_keeps_serving(start_triton) -> None:
    # Explicit model control, as the labs run it: without the key anyone could load their own code.
    server = start_triton(["echo"], model_control="explicit", extra_args=["--load-model=*"])
    for grpc in (False, True):
        _refused_then_served(server, grpc)
    # The learner's own clients send the key without being told.
    for own in (server.http_client(), server.grpc_client()):
        own.load_model("echo")
        assert own.is_model_ready("echo")


def _refused_then_served(server: srv.TritonServer, grpc: bool) -> None:
    """Every restricted call of a client without the key (HTTP or gRPC) is refused; nothing changed."""
    other = (grpcclient.InferenceServerClient(server.grpc_url) if grpc
             else httpclient.InferenceServerClient(server.http_url))
    # The attack of issue 18: a system shared-memory region that points into the Python backend's own region.
    region = server.shm_regions()[0]
    assert {stat.S_IMODE(r.stat().st_mode) for r in server.shm_regions()} == {0o600}  # nobody else reads them
    attempts = {
        "register shm": lambda: other.register_system_shared_memory("evil", "/" + region.name, 4096),
        "shm status": lambda: other.get_system_shared_memory_status(),
        "load with a file override": lambda: other.load_model(
            "echo", config='{"backend": "python"}', files={"file:1/model.py": b"import os\nos.system('id')\n"}),
        "unload": lambda: other.unload_model("echo"),
        "repository index": lambda: other.get_model_repository_index(),
        "log settings": lambda: other.update_log_settings({"log_verbose_level": 1}),
        "trace settings": lambda: other.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}),
    }
    for _what, call in attempts.items():
        _refused(call, grpc)
    wrong = {(srv.GRPC_KEY_HEADER if grpc else srv.KEY_HEADER): "not-the-key"}
    _refused(lambda: other.load_model("echo", headers=wrong), grpc)
    # Still serving, nothing changed: same model, no region registered, log level untouched.
    assert server.running
    _echo_ok(server)
    own = server.grpc_client() if grpc else server.http_client()
    status = own.get_system_shared_memory_status(**({"as_json": True} if grpc else {}))
    assert not (status.get("regions") if grpc else status), status
    logs = own.get_log_settings(**({"as_json": True} if grpc else {}))
    level = logs["settings"]["log_verbose_level"]["uint32_param"] if grpc else logs["log_verbose_level"]
    assert int(level) == 0
    # The open APIs stay open: health, metadata, model config, statistics, inference.
    assert other.is_server_ready() and other.is_model_ready("echo")
    assert other.get_model_config("echo") and other.get_inference_statistics("echo")


def test_python_backend_regions_are_private_even_after_a_later_load(start_triton) -> None:
    # The Python backend creates each region mode 0644 whatever the umask; start() and the reaper fix it.
    server = start_triton(["echo", "noop"], model_control="explicit", extra_args=["--load-model=echo"])
    first = set(server.shm_regions())
    assert first and {stat.S_IMODE(r.stat().st_mode) for r in first} == {0o600}
    server.http_client().load_model("noop")  # a new instance: a new region, made after start()
    seen: list[tuple[float, dict[str, int]]] = []  # (s after the load, modes) whenever they change
    t0 = time.monotonic()
    steady = None  # since when every region has been 0600
    while time.monotonic() - t0 < 15 and not (steady and time.monotonic() - steady > 0.5):
        modes = {r.name: stat.S_IMODE(r.stat().st_mode) for r in server.shm_regions()}
        if not seen or seen[-1][1] != modes:
            seen.append((round(time.monotonic() - t0, 2), modes))
        private = len(modes) > len(first) and set(modes.values()) == {0o600}
        steady = (steady or time.monotonic()) if private else None
        time.sleep(0.05)
    reaper = server._reaper
    assert len(seen[-1][1]) > len(first), "loading noop made no region"
    assert steady, (f"a region stayed readable by others (modes seen: {seen}; the reaper "
                    f"{'is running' if reaper and reaper.poll() is None else 'has exited'})")
    assert server.private_regions() == []  # nothing left to fix


def test_each_launch_has_its_own_hidden_key_folder_log_and_shared_memory(start_triton) -> None:
    server, other = start_triton(["echo"]), start_triton(["echo"])
    assert server.key and len(server.key) >= 32 and server.key_hidden
    ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=True).stdout
    assert server.key not in ps
    line = next(ln for ln in ps.splitlines() if f"--http-port={server.ports['http']}" in ln)
    assert f"--http-restricted-api=shared-memory,model-repository,trace,logging:{srv.KEY_HEADER}=(hidden)" in line
    # The real value travels in the environment, which only the owner (and root) can read.
    mode = stat.S_IMODE(os.stat(f"/proc/{server.pid}/environ").st_mode)
    assert mode & 0o077 == 0, oct(mode)
    # ... and still the server enforces the real key, not the placeholder, nor another launch's key.
    with pytest.raises(InferenceServerException):
        httpclient.InferenceServerClient(server.http_url).get_model_repository_index(headers={srv.KEY_HEADER: "(hidden)"})
    assert other.key != server.key
    with pytest.raises(InferenceServerException):
        httpclient.InferenceServerClient(other.http_url).get_model_repository_index(headers={srv.KEY_HEADER: server.key})
    assert server.http_client().get_model_repository_index()
    # Its folder, log and shared memory are private, named after this process, and gone after stop().
    assert stat.S_IMODE(server.workdir.stat().st_mode) == 0o700
    assert stat.S_IMODE(server.log_path.stat().st_mode) == 0o600
    assert psutil.Process(server.pid).cwd() == str(server.workdir)
    regions = server.shm_regions()
    assert regions and all(r.name.startswith(server.shm_prefix) for r in regions)
    assert server.shm_prefix.startswith(f"batchlab_{os.getpid()}_")
    workdir = server.workdir
    server.stop()
    assert not workdir.exists() and not any(r.exists() for r in regions)


def test_sweep_removes_only_dead_launches_of_this_user(tmp_path: Path) -> None:
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir(), shm.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    dead_tag = f"{dead.pid}-12345"
    live_tag = srv._owner_tag()
    entries = {
        "dead": tmp / f"batchlab-triton-{dead_tag}-abc",
        "live": tmp / f"batchlab-triton-{live_tag}-abc",
        "legacy": tmp / "batchlab-triton-k2j3h4",
        "legacy-in-use": tmp / "batchlab-triton-x9y8z7",
        "other": tmp / "unrelated-folder",
    }
    for d in entries.values():
        d.mkdir()
        (d / "tritonserver.log").write_text("log")
    regions = {"dead": shm / f"batchlab_{dead_tag.replace('-', '_')}_1234_uuid",
               "live": shm / f"batchlab_{live_tag.replace('-', '_')}_1234_uuid",
               "foreign": shm / "triton_python_backend_shm_region_uuid"}
    for r in regions.values():
        r.write_bytes(b"\0" * 64)
    sleeper = subprocess.Popen(["sleep", "30"], cwd=entries["legacy-in-use"])
    try:
        removed = srv.sweep_stale(tmp=tmp, shm=shm)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sorted(removed) == sorted([entries["dead"], entries["legacy"], regions["dead"]])
    assert all(entries[k].exists() for k in ("live", "legacy-in-use", "other"))
    assert regions["live"].exists() and regions["foreign"].exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create another user's folder")
def test_sweep_leaves_other_users_alone(tmp_path: Path) -> None:
    d = tmp_path / "batchlab-triton-1-1-abc"  # pid 1 started long before that time: a dead owner
    d.mkdir()
    os.chown(d, 65534, 65534)
    assert srv.sweep_stale(tmp=tmp_path, shm=tmp_path) == [] and d.exists()


def _launch_in_child(echo_repo: Path, env: dict[str, str] | None = None
                     ) -> tuple[subprocess.Popen[str], list[Path], psutil.Process]:
    """A Python process that starts a server and sleeps; its folder and regions; its reaper."""
    code = (
        "import sys, time; from batchlab.server import TritonServer\n"
        f"s = TritonServer({str(echo_repo)!r}).start()\n"
        "print(s.workdir, *s.shm_regions(), flush=True); time.sleep(600)\n"
    )
    parent = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    left = [Path(p) for p in parent.stdout.readline().split()]
    reaper = next(p for p in psutil.Process(parent.pid).children() if "batchlab-reaper" in " ".join(p.cmdline()))
    assert len(left) >= 2 and all(p.exists() for p in left), left
    return parent, left, reaper


def test_the_reaper_kills_what_is_left_of_the_group(tmp_path: Path) -> None:
    # A backend stub outlives a killed server (seen: an embed stub under load); the reaper's trap must end it.
    leader = subprocess.Popen(["/bin/sh", "-c", "sleep 300 & echo $!; exec sleep 300"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    orphan = psutil.Process(int(leader.stdout.readline()))
    folder = tmp_path / "launch"
    folder.mkdir()
    reaper = subprocess.Popen(srv.reaper_command(leader.pid, folder, "batchlab_test_none_", os.geteuid()))
    try:
        time.sleep(0.3)  # the reaper is in its loop
        # The launching process dies: the server gets SIGKILL (PDEATHSIG), the reaper SIGTERM, at once.
        reaper.send_signal(signal.SIGSTOP)  # hold the reaper so both are pending when it runs on
        leader.kill()
        leader.wait(timeout=10)
        assert orphan.is_running()  # the server's group lives on in the orphan
        reaper.send_signal(signal.SIGTERM)
        reaper.send_signal(signal.SIGCONT)
        reaper.wait(timeout=10)
        orphan.wait(timeout=10)
        assert not orphan.is_running() and not folder.exists()
    finally:
        with contextlib.suppress(psutil.Error):
            orphan.kill()
        if reaper.poll() is None:
            reaper.kill()


def test_a_killed_process_leaves_no_folder_or_shared_memory(echo_repo: Path) -> None:
    parent, left, reaper = _launch_in_child(echo_repo)
    try:
        parent.send_signal(signal.SIGKILL)  # no atexit, no clean-up: the reaper does it
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(p.exists() for p in left) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(p.exists() for p in left), [p for p in left if p.exists()]
        # The reaper removes the files and then exits: wait for the exit (it raced the assertion
        # when checked at the instant the files were gone), and fail if it outlives its work.
        try:
            reaper.wait(timeout=10)
        except psutil.TimeoutExpired:
            pass
        assert not reaper.is_running() or reaper.status() == psutil.STATUS_ZOMBIE, "the reaper outlived its work"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_what_a_killed_launch_left_is_swept_at_the_next_start(echo_repo: Path, start_triton, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The launch's folder goes to a temporary directory of this test alone, so that only our next
    # start can sweep it (a server started meanwhile by another test process sweeps the shared one).
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    parent, left, reaper = _launch_in_child(echo_repo, env={**os.environ, "TMPDIR": str(private)})
    try:
        os.killpg(reaper.pid, signal.SIGKILL)  # everything killed at once (kill -9 -1): nobody cleans
        parent.kill()
        parent.wait(timeout=10)
    finally:
        if parent.poll() is None:
            parent.kill()
    time.sleep(1)
    assert left[0].parent == private and left[0].exists(), left  # nobody cleaned the folder up
    start_triton(["echo"])
    assert not any(p.exists() for p in left), [p for p in left if p.exists()]


def test_external_server_takes_its_key_from_the_environment(start_triton, monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_triton(["echo"], model_control="explicit", extra_args=["--load-model=*"])
    monkeypatch.setenv("TRITON_URL", server.http_url)
    monkeypatch.setenv("TRITON_GRPC_URL", server.grpc_url)
    monkeypatch.setenv(srv.KEY_ENV, server.key)
    ext = srv.ExternalServer.from_env().start()
    assert ext.models == ["echo"]
    ext.http_client().load_model("echo")
    ext.grpc_client().unload_model("echo")
    assert not server.http_client().is_model_ready("echo")


def test_a_clock_step_does_not_make_a_live_launch_look_dead(monkeypatch) -> None:
    """psutil's epoch create time moves with the boot time it reads (whole seconds, after a clock
    step): another process comparing tags that way could sweep a live launch."""
    pid, start = map(int, srv._owner_tag().split("-"))
    stepped = psutil.boot_time() + 1.0
    monkeypatch.setattr(psutil, "boot_time", lambda: stepped)
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: stepped)
    assert srv._owner_alive(pid, start)
