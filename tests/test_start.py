"""`make start`: JupyterLab and the embedded server come up on loopback; Ctrl-C leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from batchlab.server import free_port
from procs import process_tree, still_running

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _tree(pid: int) -> list[tuple[psutil.Process, str, str]]:
    """The process and its descendants as (process, name, command line), skipping any that exit meanwhile.

    Short-lived helpers (a backend stub starting, a `ps`) can end between listing and reading them.
    """
    out = []
    for p in process_tree(pid):
        try:
            out.append((p, p.name(), " ".join(p.cmdline())))
        except psutil.NoSuchProcess:
            continue
    return out


def test_start_serves_lab_and_server_and_ctrl_c_stops_all() -> None:
    port = free_port()
    token = "t0k-" + os.urandom(8).hex()
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchlab.start", "--no-browser", "--lab-port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "JUPYTER_TOKEN": token},
    )
    try:
        info = None
        for line in proc.stdout:
            if line.startswith("{"):
                info = json.loads(line)
                break
        assert info is not None, "make start printed no JSON line"
        listed = _tree(proc.pid)
        tree = [p for p, _, _ in listed]
        names = " ".join(name for _, name, _ in listed)
        assert "tritonserver" in names
        assert "embed" in info["triton"]["models"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=10) as r:
            assert r.status == 200
        http = info["triton"]["http"]
        with urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=10) as r:
            assert r.status == 200
        # The lab's kernels will see the shared server through TRITON_URL.
        lab = next(p for p, _, cmd in listed if "jupyterlab" in cmd)
        assert lab.environ().get("TRITON_URL") == http
        key = lab.environ().get("BATCHLAB_TRITON_KEY")
        assert key and info["lab"]["token"] == token
        # Neither the lab's token nor the server's key is on any command line (`ps` shows those to all).
        ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=True).stdout
        assert token not in ps and key not in ps
        assert "--IdentityProvider.token" not in " ".join(lab.cmdline())
        proc.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends
        assert proc.wait(timeout=60) == 0
        assert still_running(tree[1:], timeout=10) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_while_starting_leaves_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "batchlab.start", "--no-browser", "--lab-port", str(free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server = None
        deadline = time.monotonic() + 60
        while server is None and time.monotonic() < deadline:  # the course repository takes a while to load
            listed = _tree(proc.pid)[1:]
            kids = [p for p, _, _ in listed]
            server = next((p for p, name, _ in listed if name == "tritonserver"), None)
            time.sleep(0.1)
        assert server is not None, "no tritonserver started"
        workdir = server.cwd()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, (out, err)
        assert "interrupted by SIGTERM during startup" in err and "Traceback" not in err
        assert still_running(kids, timeout=10) == []
        assert not os.path.exists(workdir)
    finally:
        if proc.poll() is None:
            proc.kill()
