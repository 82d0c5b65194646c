"""`make start`: JupyterLab and the embedded server come up on loopback; Ctrl-C leaves nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import psutil
import pytest

from batchlab.server import free_port

pytestmark = [pytest.mark.server, pytest.mark.slow]


def test_start_serves_lab_and_server_and_ctrl_c_stops_all() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchlab.start", "--no-browser", "--lab-port", str(port), "--token", "t0k"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        info = None
        for line in proc.stdout:
            if line.startswith("{"):
                info = json.loads(line)
                break
        assert info is not None, "make start printed no JSON line"
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        names = " ".join(p.name() for p in tree)
        assert "tritonserver" in names
        assert "embed" in info["triton"]["models"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=t0k", timeout=10) as r:
            assert r.status == 200
        http = info["triton"]["http"]
        with urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=10) as r:
            assert r.status == 200
        # The lab's kernels will see the shared server through TRITON_URL.
        lab = next(p for p in tree if "jupyterlab" in " ".join(p.cmdline()))
        assert lab.environ().get("TRITON_URL") == http
        proc.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends
        assert proc.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(tree[1:], timeout=10)
        assert [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        if proc.poll() is None:
            proc.kill()
