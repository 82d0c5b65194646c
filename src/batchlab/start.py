"""`make start`: the embedded Triton server with the course models, and JupyterLab on the course.

Both on 127.0.0.1; kernels get `TRITON_URL` and the key in their environment, JupyterLab its token.
Ctrl-C or SIGTERM (also while starting) stops everything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import urllib.request
from typing import Sequence

from batchlab.paths import cache_dir, repo_root
from batchlab.server import (DEFAULT_STARTUP_TIMEOUT_S, KEY_ENV, Interrupted, ServerError, check_port_free, connect,
                             free_port, poll, spawn, stop_group, stop_on_signals)


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {proc.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1):
            return True
        return False

    if not poll(answers, timeout, interval=0.2):
        raise RuntimeError(f"JupyterLab did not answer at {url} within {timeout:.0f} s")


#: JupyterLab settings: never ask learners about, or fetch, Jupyter news and updates.
_LAB_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def start_lab(port: int, token: str, env: dict[str, str], open_browser: bool) -> subprocess.Popen[bytes]:
    """Start JupyterLab on 127.0.0.1:`port` in the course folder, in its own process group (token via env)."""
    settings = cache_dir() / "lab-settings"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "overrides.json").write_text(json.dumps(_LAB_OVERRIDES, indent=2))
    cmd = [
        sys.executable, "-m", "jupyterlab",
        "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
        f"--ServerApp.root_dir={repo_root()}",
        "--ServerApp.open_browser=" + ("True" if open_browser else "False"),
        "--LabApp.news_url=None",  # no announcement feed: the course runs on closed networks too
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.app_settings_dir={settings}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI run as root
        cmd.append("--allow-root")
    proc, _ = spawn(cmd, env={**env, "JUPYTER_TOKEN": token}, stdin=subprocess.DEVNULL)
    return proc


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server and JupyterLab until Ctrl-C; print the URLs and one JSON line."""
    p = argparse.ArgumentParser(prog="python -m batchlab.start", description=__doc__.splitlines()[0])
    p.add_argument("--lab-port", type=int, default=None, help="JupyterLab port (default 8888, else a free one)")
    p.add_argument("--token", default=None,
                   help="JupyterLab token (default: $JUPYTER_TOKEN, else a fresh random one); prefer the "
                        "variable: a command-line argument is visible to every user in `ps`")
    p.add_argument("--no-lab", action="store_true", help="only the Triton server")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("--timeout", type=float, default=DEFAULT_STARTUP_TIMEOUT_S, help="seconds to wait for readiness")
    args = p.parse_args(argv)

    stop = threading.Event()
    started = stop_on_signals(stop)  # a signal while starting up raises Interrupted

    try:
        lab_port = 8888 if args.lab_port is None else args.lab_port
        try:
            check_port_free(lab_port, "lab")
        except ServerError:
            if args.lab_port is not None:
                raise
            lab_port = free_port()
        print("starting the embedded Triton server with the course models ...", flush=True)
        server = connect(private=True, startup_timeout=args.timeout).start()
    except (ServerError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:  # `start` has stopped what it started
        print(f"{exc} during startup: stopped, nothing left running", file=sys.stderr)
        return 128 + exc.signum

    lab = None
    try:
        env = dict(os.environ)
        env.update(TRITON_URL=server.http_url, TRITON_GRPC_URL=server.grpc_url,
                   TRITON_METRICS_URL=server.metrics_url, **{KEY_ENV: server.key})
        info = {"triton": server.info()}
        print(f"Triton HTTP    http://{server.http_url}   (models: {', '.join(server.models)})")
        print(f"Triton gRPC    {server.grpc_url}")
        print(f"Triton metrics http://{server.metrics_url}/metrics")
        if not args.no_lab:
            token = args.token or os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(16)
            lab = start_lab(lab_port, token, env, open_browser=not args.no_browser)
            _wait_http(f"http://127.0.0.1:{lab_port}/api/status?token={token}", args.timeout, lab)
            url = f"http://127.0.0.1:{lab_port}/lab/tree/notebooks/index.ipynb?token={token}"
            info["lab"] = {"url": url, "port": lab_port, "token": token}
            print(f"JupyterLab     {url}")
        started()
        print("Ctrl-C stops everything.", flush=True)
        print(json.dumps(info), flush=True)
        while not stop.is_set():
            if not server.running:
                print(f"error: tritonserver exited unexpectedly\n{server.log_tail()}", file=sys.stderr)
                return 1
            if lab is not None and lab.poll() is not None:
                print(f"error: JupyterLab exited with code {lab.returncode}", file=sys.stderr)
                return 1
            stop.wait(0.5)
        print("stopping ...", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"{exc} during startup: stopping", file=sys.stderr)
        return 128 + exc.signum
    finally:
        if lab is not None:
            stop_group(lab, 10.0)  # SIGTERM first: JupyterLab shuts its kernels down
        server.stop()
        print("stopped: no server or JupyterLab process left.", flush=True)


if __name__ == "__main__":
    sys.exit(main())
