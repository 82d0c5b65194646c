"""The embedded Triton Inference Server: start it, wait for it, stop it, leave nothing behind.

The `tritonserver` binary (2.51) and its Python backend come from the `nvidia-pytriton` wheel; we
use only those, not pytriton's decorator API. The launcher

- builds a backend folder in the course cache holding the Python backend and the
  `triton_python_backend_stub` that matches the running Python (never writing into
  site-packages);
- binds HTTP, gRPC and metrics to 127.0.0.1, on free ports unless ports are given;
- waits until the server and every model are ready, or raises an error that names the cause;
- stops the whole process group (server and backend stubs): SIGTERM, then SIGKILL after a short
  grace; it is also stopped at interpreter exit and killed by the kernel if its parent dies.

Notebooks use it as a context manager::

    from batchlab.server import connect
    with connect() as server:
        client = server.grpc_client()

`TRITON_URL` (HTTP, ``host:port``) and optionally `TRITON_GRPC_URL` / `TRITON_METRICS_URL` make
`connect` use an external server (an NGC container, or the one `make start` launched) instead.

Command line: ``python -m batchlab.server [--repo DIR] [--http-port N ...] [--check]``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Iterable, Sequence

import psutil
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient

from batchlab.paths import MODEL_REPOSITORY, cache_dir

LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class ServerError(RuntimeError):
    """The server could not be started, did not become ready, or failed."""


class PortInUseError(ServerError):
    """A requested port is already taken by another process."""


class ModelLoadError(ServerError):
    """A model in the repository failed to load (bad config.pbtxt, `initialize` raised, ...)."""


# --------------------------------------------------------------------------- locating the binary


def _pytriton_dist() -> Path:
    """The `pytriton/tritonserver` folder of the installed nvidia-pytriton wheel."""
    try:
        import pytriton  # noqa: F401  (only located, never used)
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency
        raise ServerError(
            "nvidia-pytriton is not installed; run `make start` or `pip install -e .`"
        ) from exc
    root = Path(pytriton.__file__).resolve().parent / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise ServerError(f"no tritonserver binary under {root}: is nvidia-pytriton 0.7.0 installed whole?")
    return root


def find_tritonserver() -> Path:
    """Path of the `tritonserver` executable shipped with nvidia-pytriton."""
    return _pytriton_dist() / "bin" / "tritonserver"


def _libs_dir() -> Path:
    """The wheel's bundled shared libraries (auditwheel's `nvidia_pytriton.libs`)."""
    return _pytriton_dist().parent.parent / "nvidia_pytriton.libs"


def prepare_backend_dir(python_version: str | None = None) -> Path:
    """Build (once) and return a backend directory holding `python/` with the matching stub.

    The folder lives in the course cache, keyed by the wheel's location and Python version, and
    is written atomically so that concurrent starts never see a half-copied stub.
    """
    ver = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    dist = _pytriton_dist()
    stub = dist / "python_backend_stubs" / ver / "triton_python_backend_stub"
    if not stub.is_file():
        have = sorted(p.name for p in (dist / "python_backend_stubs").iterdir())
        raise ServerError(f"nvidia-pytriton ships no Python backend stub for Python {ver} (has {', '.join(have)})")
    src = dist / "backends" / "python"
    key = hashlib.sha1(f"{dist}|{stub.stat().st_mtime_ns}|{ver}".encode()).hexdigest()[:12]
    target = cache_dir() / "backends" / f"py{ver}-{key}"
    if (target / "python" / "triton_python_backend_stub").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        (tmp / "python").mkdir()
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy2(src / name, tmp / "python" / name)
        shutil.copy2(stub, tmp / "python" / "triton_python_backend_stub")
        try:
            tmp.rename(target)
        except OSError:  # another process won the race; use its copy
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver: its libraries, and the running Python for the stubs.

    The stub embeds libpython and finds its prefix through the `python3` on PATH, so the folder
    of the running interpreter goes first on PATH (a venv's site-packages, with batchlab
    installed, is then importable by every model), and that interpreter's libpython first on
    LD_LIBRARY_PATH.
    """
    env = dict(os.environ if base is None else base)
    libs = [str(_libs_dir())]
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and (Path(libdir) / soname).exists():
        libs.insert(0, libdir)
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    env.pop("PYTHONHOME", None)
    return env


# --------------------------------------------------------------------------- ports


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _owner_of_port(port: int) -> str:
    """Best effort: 'pid N (name)' of the process listening on `port`, or ''."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    except Exception:
        pass
    return ""


def check_port_free(port: int, what: str, host: str = LOOPBACK) -> None:
    """Raise `PortInUseError` naming the port (and its owner, where known) if it is taken."""
    if not 0 < port < 65536:
        raise ValueError(f"{what} port {port} is not a valid TCP port (1-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                owner = _owner_of_port(port)
                by = f" by {owner}" if owner else ""
                raise PortInUseError(
                    f"{what} port {port} on {host} is already in use{by}; choose another port "
                    f"(--{what}-port) or omit it to get a free one"
                ) from None
            raise


# --------------------------------------------------------------------------- readiness over HTTP


def _http(method: str, url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def repository_index(http_url: str) -> list[dict[str, Any]]:
    """The server's model repository index: [{'name', 'version', 'state', 'reason'}, ...]."""
    code, body = _http("POST", f"http://{http_url}/v2/repository/index")
    if code != 200:
        raise ServerError(f"repository index request failed with HTTP {code}: {body[:200]!r}")
    return json.loads(body or b"[]")


def wait_until_ready(http_url: str, timeout: float, alive: Any = None) -> list[str]:
    """Poll until the server is ready and every indexed, loaded model is READY.

    `alive` is an optional callable returning False once the server process has exited.
    Returns the names of the ready models.
    """
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise ServerError("exited")
        try:
            code, _ = _http("GET", f"http://{http_url}/v2/health/ready", timeout=1.0)
            if code == 200:
                index = repository_index(http_url)
                pending = [m["name"] for m in index if m.get("state") not in ("READY", "UNAVAILABLE", None)]
                if not pending:
                    return sorted({m["name"] for m in index if m.get("state") == "READY"})
                last = f"models still loading: {', '.join(pending)}"
            else:
                last = f"/v2/health/ready answered HTTP {code}"
        except (OSError, urllib.error.URLError, ServerError) as exc:
            last = str(exc)
        time.sleep(0.1)
    raise TimeoutError(f"server not ready after {timeout:.0f} s ({last})")


# --------------------------------------------------------------------------- log diagnosis

_LOAD_FAIL = re.compile(r"failed to load '([^']+)' version \d+: (.*?)\"?$")
_POLL_FAIL = re.compile(r"Poll failed for model directory '([^']+)': (.*?)\"?$")
_PROTO = re.compile(r"Error parsing text-format inference\.ModelConfig: (\d+):(\d+): (.*)$")
_NOISE = ("nvml", "dcgm", "cudadriverhelper", "pinned memory", "cuda memory pool", "collecting cpu metrics")


def diagnose(log: str) -> tuple[type[ServerError], str]:
    """Turn a server log into (error class, one-paragraph cause)."""
    failures = []
    for line in log.splitlines():
        m = _LOAD_FAIL.search(line)
        if m:
            detail = m.group(2).encode().decode("unicode_escape", errors="replace").strip()
            first = detail.splitlines()[0] if detail else "unknown error"
            failures.append(f"model '{m.group(1)}' failed to load: {first}")
    proto = [_PROTO.search(line) for line in log.splitlines()]
    proto = [m for m in proto if m]
    for i, line in enumerate(log.splitlines()):
        m = _POLL_FAIL.search(line)
        if m:
            where = f" (line {proto[0].group(1)}, column {proto[0].group(2)}: {proto[0].group(3)})" if proto else ""
            failures.append(f"model '{m.group(1)}': {m.group(2)}{where}")
    if failures:
        return ModelLoadError, "; ".join(failures)
    low = log.lower()
    if "already in use" in low or "address in use" in low or "failed to bind" in low:
        sock = re.search(r"Socket '([^']+)' already in use", log)
        what = f"{sock.group(1)} is" if sock else "a port the server needs is"
        return PortInUseError, f"{what} already in use (another process took it)"
    for pat in ("unexpected", "parse error", "error parsing", "failed to open", "no such file", "error: "):
        for line in log.splitlines():
            if pat in line.lower() and "nvml" not in line.lower() and "dcgm" not in line.lower():
                return ServerError, line.strip()
    return ServerError, "the server exited during startup"


def _tail(text: str, n: int = 25) -> str:
    """The last `n` lines of a server log that say something (no tables, no GPU-probe noise)."""
    keep = []
    for ln in text.splitlines():
        s = ln.strip()
        if not s or s[0] in "+|" or any(k in s.lower() for k in _NOISE):
            continue
        if re.search(r"(server|tritonserver)\.cc:\d+\]$", s):
            continue
        keep.append(ln)
    return "\n".join(keep[-n:])


# --------------------------------------------------------------------------- process handling


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:
        pass


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _shm_regions(pgid: int) -> list[str]:
    """The /dev/shm files that the processes of group `pgid` have mapped (the Python backend's)."""
    paths: set[str] = set()
    try:
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) != pgid:
                    continue
                for m in proc.memory_maps(grouped=True):
                    if m.path.startswith("/dev/shm/triton_python_backend"):
                        paths.add(m.path.split(" (deleted)")[0])
            except (psutil.Error, OSError):
                continue
    except ImportError:
        pass
    return sorted(paths)


_LIVE: "weakref.WeakSet[TritonServer]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


class TritonServer:
    """One embedded tritonserver process with its model repository, on loopback.

    Parameters mirror tritonserver's flags: `repo` (default: the course model repository),
    `http_port` / `grpc_port` / `metrics_port` (default: free ports), `model_control`
    ("none" loads everything in `repo`; "explicit" loads only `models`), `startup_timeout`
    seconds for the server and all models to become ready, `stop_grace` seconds between SIGTERM
    and SIGKILL, `metrics_config` (e.g. ``["summary_latencies=true"]``), `extra_args` passed
    through, and `log_verbose`.
    """

    def __init__(
        self,
        repo: str | os.PathLike[str] | None = None,
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        model_control: str = "none",
        models: Sequence[str] | None = None,
        startup_timeout: float = 60.0,
        stop_grace: float = 10.0,
        metrics_config: Iterable[str] = (),
        extra_args: Iterable[str] = (),
        log_verbose: int = 0,
    ) -> None:
        self.repo = Path(repo).resolve() if repo is not None else MODEL_REPOSITORY
        if model_control not in ("none", "explicit", "poll"):
            raise ValueError(f"model_control must be 'none', 'explicit' or 'poll', not {model_control!r}")
        if models and model_control == "none":
            model_control = "explicit"
        self.model_control = model_control
        self.requested_models = list(models or [])
        self._ports_given = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.metrics_config = list(metrics_config)
        self.extra_args = list(extra_args)
        self.log_verbose = log_verbose
        self.ports: dict[str, int] = {}
        self.models: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._lock = threading.Lock()

    # -- addresses -------------------------------------------------------------------------

    @property
    def http_url(self) -> str:
        """``127.0.0.1:PORT`` of the HTTP/REST endpoint."""
        return f"{LOOPBACK}:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:PORT`` of the gRPC endpoint."""
        return f"{LOOPBACK}:{self.ports['grpc']}"

    @property
    def metrics_url(self) -> str:
        """``127.0.0.1:PORT`` of the Prometheus metrics endpoint (``/metrics``)."""
        return f"{LOOPBACK}:{self.ports['metrics']}"

    @property
    def pid(self) -> int | None:
        """Process id of tritonserver while it runs."""
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def info(self) -> dict[str, Any]:
        """The addresses and ready models, as the CLI prints them."""
        return {"http": self.http_url, "grpc": self.grpc_url, "metrics": self.metrics_url, "models": self.models}

    # -- clients ---------------------------------------------------------------------------

    def http_client(self, **kwargs: Any) -> Any:
        """A `tritonclient.http.InferenceServerClient` for this server."""
        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def grpc_client(self, **kwargs: Any) -> Any:
        """A `tritonclient.grpc.InferenceServerClient` for this server."""
        return grpcclient.InferenceServerClient(self.grpc_url, **kwargs)

    def aio_grpc_client(self, **kwargs: Any) -> Any:
        """A `tritonclient.grpc.aio.InferenceServerClient` (create it inside the event loop)."""
        return aioclient.InferenceServerClient(self.grpc_url, **kwargs)

    # -- log -------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path | None:
        """The server's log file while it exists."""
        return self._workdir / "tritonserver.log" if self._workdir else None

    def log(self) -> str:
        """The whole server log so far."""
        path = self.log_path
        if path and path.exists():
            return path.read_text(errors="replace")
        return ""

    def log_tail(self, n: int = 25) -> str:
        """The last `n` meaningful lines of the server log."""
        return _tail(self.log(), n)

    # -- lifecycle -------------------------------------------------------------------------

    def _command(self, backend_dir: Path) -> list[str]:
        cmd = [
            str(find_tritonserver()),
            f"--model-repository={self.repo}",
            f"--backend-directory={backend_dir}",
            f"--http-address={LOOPBACK}",
            f"--grpc-address={LOOPBACK}",
            f"--metrics-address={LOOPBACK}",
            f"--http-port={self.ports['http']}",
            f"--grpc-port={self.ports['grpc']}",
            f"--metrics-port={self.ports['metrics']}",
            f"--model-control-mode={self.model_control}",
            "--exit-timeout-secs=5",
            "--strict-readiness=true",
            f"--log-verbose={self.log_verbose}",
        ]
        cmd += [f"--load-model={m}" for m in self.requested_models]
        cmd += [f"--metrics-config={c}" for c in self.metrics_config]
        cmd += self.extra_args
        return cmd

    def _check_repo(self) -> None:
        if not self.repo.is_dir():
            raise ServerError(f"model repository {self.repo} does not exist")
        found = [p.parent.name for p in self.repo.glob("*/config.pbtxt")]
        if not found:
            raise ServerError(f"model repository {self.repo} holds no model (no */config.pbtxt)")
        missing = [m for m in self.requested_models if m not in found]
        if missing:
            raise ServerError(f"model(s) {', '.join(missing)} not in {self.repo} (has {', '.join(sorted(found))})")

    def start(self) -> "TritonServer":
        """Start the server and wait until it and its models are ready; return self."""
        with self._lock:
            if self.running:
                return self
            self._check_repo()
            for what, port in self._ports_given.items():
                if port is not None:
                    check_port_free(port, what)
            backend_dir = prepare_backend_dir()
            attempts = 1 if all(self._ports_given.values()) else 3
            for attempt in range(attempts):
                self.ports = {k: (v if v is not None else free_port()) for k, v in self._ports_given.items()}
                try:
                    self._launch(backend_dir)
                    return self
                except PortInUseError:
                    if attempt == attempts - 1:
                        raise
            raise AssertionError("unreachable")

    def _launch(self, backend_dir: Path) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="batchlab-triton-"))
        logf = open(self._workdir / "tritonserver.log", "wb")
        try:
            self._proc = subprocess.Popen(
                self._command(backend_dir),
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=server_env(),
                cwd=self._workdir,
                start_new_session=True,  # own process group: stubs included, stopped together
                preexec_fn=_set_pdeathsig,
            )
        finally:
            logf.close()
        _LIVE.add(self)
        try:
            self.models = wait_until_ready(self.http_url, self.startup_timeout, alive=lambda: self.running)
            index = repository_index(self.http_url)
            broken = [m for m in index if m.get("state") == "UNAVAILABLE"]
            if broken:
                raise ModelLoadError(
                    "; ".join(f"model '{m['name']}' failed to load: {m.get('reason', '')}" for m in broken)
                )
        except ServerError as exc:
            self._proc.wait(timeout=10) if not self.running else None
            log = self.log()
            cls, cause = diagnose(log) if not isinstance(exc, ModelLoadError) else (ModelLoadError, str(exc))
            self.stop()
            raise cls(f"tritonserver failed to start: {cause}\n--- last lines of the server log ---\n{_tail(log)}") from None
        except TimeoutError as exc:
            log = self.log()
            self.stop()
            raise ServerError(f"tritonserver failed to start: {exc}\n--- last lines of the server log ---\n{_tail(log)}") from None

    def stop(self) -> None:
        """Stop the server and every backend stub: SIGTERM, then SIGKILL after `stop_grace` s."""
        proc, self._proc = self._proc, None
        if proc is not None:
            pgid = proc.pid  # start_new_session: the server leads its own group
            shm = _shm_regions(pgid)
            _kill_group(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_grace)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            deadline = time.monotonic() + 5
            while _group_alive(pgid) and time.monotonic() < deadline:
                _kill_group(pgid, signal.SIGKILL)
                time.sleep(0.05)
            for path in shm:  # a killed stub cannot unlink its shared-memory region; we do
                with contextlib.suppress(OSError):
                    os.unlink(path)
        _LIVE.discard(self)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running on {self.http_url}" if self.running else "stopped"
        return f"<TritonServer {state}, repo={self.repo}, models={self.models}>"


class ExternalServer:
    """A Triton server someone else runs (an NGC container, `make start`), named by env vars.

    Same interface as `TritonServer`; `start` only waits for readiness and `stop` does nothing.
    """

    def __init__(self, http_url: str, grpc_url: str | None = None, metrics_url: str | None = None,
                 startup_timeout: float = 30.0) -> None:
        def strip(u: str) -> str:
            return re.sub(r"^[a-z]+://", "", u).rstrip("/")

        self.http_url = strip(http_url)
        host, _, port = self.http_url.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"TRITON_URL must look like host:port, not {http_url!r}")
        self.grpc_url = strip(grpc_url) if grpc_url else f"{host}:{int(port) + 1}"
        self.metrics_url = strip(metrics_url) if metrics_url else f"{host}:{int(port) + 2}"
        self.startup_timeout = startup_timeout
        self.models: list[str] = []
        self.running = False

    @classmethod
    def from_env(cls) -> "ExternalServer | None":
        """An `ExternalServer` from TRITON_URL / TRITON_GRPC_URL / TRITON_METRICS_URL, or None."""
        url = os.environ.get("TRITON_URL")
        if not url:
            return None
        return cls(url, os.environ.get("TRITON_GRPC_URL"), os.environ.get("TRITON_METRICS_URL"))

    def start(self) -> "ExternalServer":
        """Wait until the external server is ready."""
        try:
            self.models = wait_until_ready(self.http_url, self.startup_timeout)
        except (TimeoutError, ServerError) as exc:
            raise ServerError(f"the Triton server at TRITON_URL={self.http_url} is not ready: {exc}") from None
        self.running = True
        return self

    def stop(self) -> None:
        """Nothing to stop: the server belongs to someone else."""
        self.running = False

    info = TritonServer.info
    http_client = TritonServer.http_client
    grpc_client = TritonServer.grpc_client
    aio_grpc_client = TritonServer.aio_grpc_client

    def log_tail(self, n: int = 25) -> str:
        """An external server's log is not ours to read."""
        return "(external server: read its own log)"

    def __enter__(self) -> "ExternalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ExternalServer {self.http_url}, models={self.models}>"


def connect(repo: str | os.PathLike[str] | None = None, **kwargs: Any) -> TritonServer | ExternalServer:
    """The server a notebook should use: the external one named by TRITON_URL, else an embedded one.

    Use it as a context manager; an embedded server is stopped on exit, an external one is not.
    """
    external = ExternalServer.from_env()
    if external is not None:
        return external
    return TritonServer(repo, **kwargs)


# --------------------------------------------------------------------------- command line


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m batchlab.server",
        description="Run the embedded Triton server on 127.0.0.1 with a model repository.",
    )
    p.add_argument("--repo", default=str(MODEL_REPOSITORY), help="model repository (default: the course's)")
    p.add_argument("--http-port", type=int)
    p.add_argument("--grpc-port", type=int)
    p.add_argument("--metrics-port", type=int)
    p.add_argument("--model-control-mode", choices=["none", "explicit"], default="none")
    p.add_argument("--load-model", action="append", default=[], help="with explicit mode: a model to load")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for readiness")
    p.add_argument("--check", action="store_true", help="start, print the JSON line, stop, exit 0")
    p.add_argument("--log-verbose", type=int, default=0)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: prints one JSON line once ready, runs until SIGINT/SIGTERM."""
    args = _parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server = TritonServer(
        args.repo,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_control=args.model_control_mode,
        models=args.load_model,
        startup_timeout=args.timeout,
        log_verbose=args.log_verbose,
    )
    try:
        server.start()
    except (ServerError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(server.info()), flush=True)
        if not args.check:
            while not stop.is_set() and server.running:
                stop.wait(0.5)
            if not server.running and not stop.is_set():
                print(f"error: tritonserver exited unexpectedly\n{server.log_tail()}", file=sys.stderr)
                return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
