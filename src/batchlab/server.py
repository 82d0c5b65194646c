"""The embedded Triton server (`tritonserver` 2.51 and Python backend of the nvidia-pytriton wheel).

`TritonServer` runs one on loopback with a per-launch key for the `RESTRICTED_APIS`, waits until it
is ready and is the one it started, and stops its whole process group (also at exit, and when this
process dies). `connect()` gives the server named by `TRITON_URL` (an `ExternalServer`), else an
embedded one. CLI: ``python -m batchlab.server [--repo DIR] [--http-port N ...] [--check]``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import errno
import functools
import hashlib
import json
import os
import queue
import re
import resource
import secrets
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
import warnings
import weakref
from concurrent.futures import Future, wait as wait_futures
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import triton_to_np_dtype

from batchlab.config_pbtxt import ConfigError
from batchlab.paths import MODEL_REPOSITORY, cache_dir

_T = TypeVar("_T")

LOOPBACK = "127.0.0.1"

KEY_HEADER = "x-batchlab-key"
"""HTTP header that carries a server's key."""

GRPC_KEY_HEADER = "triton-grpc-protocol-" + KEY_HEADER
"""gRPC metadata key that carries it: Triton 2.51 prefixes restricted gRPC headers like this."""

KEY_ENV = "BATCHLAB_TRITON_KEY"
"""Environment variable naming an external server's key (set by `make start` for its kernels)."""

RESTRICTED_APIS = ("shared-memory", "model-repository", "trace", "logging")
"""The Triton API groups only key holders may use (``--http-restricted-api`` and
``--grpc-restricted-protocol``). Open: health, metadata, model-config, statistics, inference."""

SHM_LIMIT_BYTES = 64 * 2**20
"""``RLIMIT_FSIZE`` of the server and its stubs: caps each Python-backend shared-memory region and the log."""

MAX_REQUEST_BYTES = 16 * 2**20
"""Largest request (sum of its input tensors) this module's clients send; larger ones: ValueError."""

DEFAULT_STARTUP_TIMEOUT_S = 120.0
"""Seconds `start` waits for the server and its models (a cold start on two busy cores, several times)."""

_PR_SET_PDEATHSIG = 1
_PTRACE_TRACEME = 0
_PTRACE_DETACH = 17
_HIDDEN_ENV = "BATCHLAB_HIDDEN_ARG_"
_HIDDEN = "(hidden)"
# Large buffers from mmap, so a big request's memory goes back to the system when freed. Only
# tritonserver gets this: BASH_ENV drops it in the `bash -c` that starts each stub (it slows numpy).
_SERVER_TUNABLES = "glibc.malloc.mmap_threshold=65536"


class ServerError(RuntimeError):
    """The server could not be started, did not become ready, or failed."""


class PortInUseError(ServerError):
    """A requested port is already taken by another process."""


class ModelLoadError(ServerError):
    """A model in the repository failed to load (bad config.pbtxt, `initialize` raised, ...)."""


def _pytriton_dist() -> Path:
    """The `pytriton/tritonserver` folder of the installed nvidia-pytriton wheel (a hard dependency)."""
    import pytriton  # only located, never used

    root = Path(pytriton.__file__).resolve().parent / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise ServerError(f"no tritonserver binary under {root}: is nvidia-pytriton 0.7.0 installed whole?")
    return root


def prepare_backend_dir() -> Path:
    """A backend directory with `python/` and the stub for this Python, built once (atomically) in the cache."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
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
        for f in (src / "libtriton_python.so", src / "triton_python_backend_utils.py", stub):
            shutil.copy2(f, tmp / "python" / f.name)
        with contextlib.suppress(OSError):  # another process won the race; use its copy
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left there after the rename
    return target


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on `host` right now."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """`n` distinct TCP ports free on `host` right now (held together while chosen, so none repeats)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]


def _owner_of_port(port: int) -> str:
    """Best effort: 'pid N (name)' of the process listening on `port`, or ''."""
    with contextlib.suppress(Exception):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    return ""


def _port_in_use(what: str, port: int, host: str = LOOPBACK, by: str = "") -> PortInUseError:
    owner = by or _owner_of_port(port)
    return PortInUseError(
        f"{what} port {port} on {host} is already in use{' by ' + owner if owner else ''}; "
        f"choose another port (--{what}-port) or omit it to get a free one"
    )


def check_port_free(port: int, what: str, host: str = LOOPBACK) -> None:
    """Raise `PortInUseError` naming the port (and its owner) if it is taken (TIME_WAIT counts as free)."""
    if not 0 < port < 65536:
        raise ValueError(f"{what} port {port} is not a valid TCP port (1-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise _port_in_use(what, port, host) from None
            raise


def check_request_size(inputs: Iterable[Any], limit: int = MAX_REQUEST_BYTES) -> None:
    """Raise ValueError when tritonclient `InferInput`s hold more than `limit` bytes (shared memory: 0)."""
    total = 0
    for inp in inputs:
        raw = getattr(inp, "_raw_data", None)  # tritonclient.http, binary
        if raw is None:
            raw = getattr(inp, "_raw_content", None)  # tritonclient.grpc
        if raw is not None:
            total += len(raw)
        elif getattr(inp, "_data", None) is not None and inp.datatype() != "BYTES":  # http, JSON
            total += int(np.prod(inp.shape())) * np.dtype(triton_to_np_dtype(inp.datatype())).itemsize
    if total > limit:
        raise ValueError(
            f"request of {total / 2**20:.1f} MiB is over the course server's limit of {limit / 2**20:.0f} MiB "
            f"per request (batchlab.server.MAX_REQUEST_BYTES): send it as several smaller requests"
        )


def keyed_client(client: Any, key: str | None, grpc: bool) -> Any:
    """`client` with `key` on every request (when there is one) and infer calls that refuse requests over
    `MAX_REQUEST_BYTES` (set on the instance, so ``type(client).__module__`` stays tritonclient's)."""
    header = GRPC_KEY_HEADER if grpc else KEY_HEADER

    def add_key(request: Any) -> None:  # a tritonclient plugin; its repr does not show the key
        request.headers[header] = key

    if key:
        client.register_plugin(add_key)
    for name in ("infer", "async_infer", "async_stream_infer"):  # the http client has no async_stream_infer
        orig = getattr(client, name, None)
        if orig is not None:
            def wrapped(*args: Any, _orig: Any = orig, **kwargs: Any) -> Any:
                check_request_size(kwargs.get("inputs", args[1] if len(args) > 1 else ()))
                return _orig(*args, **kwargs)
            setattr(client, name, functools.update_wrapper(wrapped, orig))
    return client


class _Clients:
    """What `TritonServer` and `ExternalServer` share: clients that carry the key, a context manager."""

    http_url: str
    grpc_url: str
    metrics_url: str
    models: list[str]
    key: str | None
    start: Callable[[], Any]
    stop: Callable[[], None]

    def info(self) -> dict[str, Any]:
        """The addresses and ready models, as the CLI prints them."""
        return {"http": self.http_url, "grpc": self.grpc_url, "metrics": self.metrics_url, "models": self.models}

    def http_client(self, **kwargs: Any) -> Any:
        """A `tritonclient.http.InferenceServerClient` for this server (it sends the key)."""
        return keyed_client(httpclient.InferenceServerClient(self.http_url, **kwargs), self.key, grpc=False)

    def grpc_client(self, **kwargs: Any) -> Any:
        """A `tritonclient.grpc.InferenceServerClient` for this server (it sends the key)."""
        return keyed_client(grpcclient.InferenceServerClient(self.grpc_url, **kwargs), self.key, grpc=True)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _http(method: str, url: str, timeout: float = 2.0, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None,
                                 headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def repository_index(http_url: str, key: str | None = None) -> list[dict[str, Any]]:
    """The model repository index [{'name', 'version', 'state', 'reason'}, ...] (a restricted API: `key`)."""
    code, body = _http("POST", f"http://{http_url}/v2/repository/index",
                       headers={KEY_HEADER: key} if key else None)
    if code != 200:
        hint = f"; it needs the server's key ({KEY_ENV})" if code == 403 else ""
        raise ServerError(f"repository index request failed with HTTP {code}{hint}: {body[:200]!r}")
    return json.loads(body or b"[]")


def poll(probe: Callable[[], _T], timeout: float, interval: float = 0.1,
         done: Callable[[_T], bool] = bool) -> _T:
    """Call `probe()` every `interval` s until `done(result)` or `timeout` s have passed; the last result
    (the course's one wait-until-a-deadline loop: the caller raises when it is not done)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value) or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_until_ready(http_url: str, timeout: float, alive: Callable[[], bool] | None = None,
                     key: str | None = None, own: bool = False, silent_s: float | None = None) -> list[str]:
    """Poll until the server and every loaded model are READY; return the ready models' names.

    `alive`: False once the server process has exited. ``own=True``: the server must grant the
    index with `key` and refuse it without, else it is another server on the port (PortInUseError).
    `silent_s`: TimeoutError early when nothing answered for that long.
    """
    headers = {KEY_HEADER: key} if key else None
    port = int(http_url.rpartition(":")[2])
    t0 = time.monotonic()
    state = {"last": "no answer yet", "answered": False}

    def ready() -> list[str] | None:
        if silent_s is not None and not state["answered"] and time.monotonic() - t0 > silent_s:
            raise TimeoutError(f"server not ready after {time.monotonic() - t0:.0f} s ({state['last']})")
        if alive is not None and not alive():
            raise ServerError("exited")
        try:
            what, (code, body) = "/v2/health/ready", _http("GET", f"http://{http_url}/v2/health/ready", timeout=1.0)
            state["answered"] = True
            if code == 200:
                what, (code, body) = "repository index", _http("POST", f"http://{http_url}/v2/repository/index",
                                                               headers=headers)
            if code == 403:
                raise (_port_in_use("http", port, by="another Triton server (it refuses our key)") if own else
                       ServerError(f"the server at {http_url} restricts its repository API: set {KEY_ENV} to its key"))
            if code != 200:
                state["last"] = f"{what} answered HTTP {code}"
                return None
            index = json.loads(body or b"[]")
        except (OSError, urllib.error.URLError, ValueError) as exc:
            state["last"] = str(exc)
            return None
        pending = [m["name"] for m in index if m.get("state") not in ("READY", "UNAVAILABLE", None)]
        if pending:
            state["last"] = f"models still loading: {', '.join(pending)}"
            return None
        if own and _http("POST", f"http://{http_url}/v2/repository/index")[0] != 403:
            raise _port_in_use("http", port, by="another Triton server (it answers without our key)")
        return sorted({m["name"] for m in index if m.get("state") == "READY"})

    names = poll(ready, timeout, interval=0.1, done=lambda v: v is not None)
    if names is None:
        raise TimeoutError(f"server not ready after {time.monotonic() - t0:.0f} s ({state['last']})")
    return names


_LOAD_FAIL = re.compile(r"failed to load '([^']+)' version \d+: (.*?)\"?$")
_POLL_FAIL = re.compile(r"Poll failed for model directory '([^']+)': (.*?)\"?$")
_PROTO = re.compile(r"Error parsing text-format inference\.ModelConfig: (\d+):(\d+): (.*)$")
_NOISE = ("nvml", "dcgm", "cudadriverhelper", "pinned memory", "cuda memory pool", "collecting cpu metrics")


def diagnose(log: str) -> tuple[type[ServerError], str]:
    """Turn a server log into (error class, one-paragraph cause)."""
    lines = log.splitlines()
    failures = []
    for m in filter(None, map(_LOAD_FAIL.search, lines)):
        detail = m.group(2).encode().decode("unicode_escape", errors="replace").strip()
        first = detail.splitlines()[0] if detail else "unknown error"
        failures.append(f"model '{m.group(1)}' failed to load: {first}")
    proto = next(filter(None, map(_PROTO.search, lines)), None)
    where = f" ({ConfigError(proto.group(3), int(proto.group(1)), int(proto.group(2)))})" if proto else ""
    for m in filter(None, map(_POLL_FAIL.search, lines)):
        failures.append(f"model '{m.group(1)}': {m.group(2)}{where}")
    if failures:
        return ModelLoadError, "; ".join(failures)
    low = log.lower()
    if "already in use" in low or "address in use" in low or "failed to bind" in low:
        sock = re.search(r"Socket '([^']+)' already in use", log)
        what = f"{sock.group(1)} is" if sock else "a port the server needs is"
        return PortInUseError, f"{what} already in use (another process took it)"
    for pat in ("unexpected", "parse error", "error parsing", "failed to open", "no such file", "error: "):
        for line in lines:
            if pat in line.lower() and "nvml" not in line.lower() and "dcgm" not in line.lower():
                return ServerError, line.strip()
    return ServerError, "the server exited during startup"


def _tail(text: str, n: int = 25) -> str:
    """The last `n` lines of a server log that say something (no tables, no GPU-probe noise)."""
    keep = []
    for ln in text.splitlines():
        s = ln.strip()
        noise = any(k in s.lower() for k in _NOISE) or re.search(r"(server|tritonserver)\.cc:\d+\]$", s)
        if s and s[0] not in "+|" and not noise:
            keep.append(ln)
    return "\n".join(keep[-n:])


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_LIBC.ptrace.restype = ctypes.c_long


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while a member of the group runs; killed members left as zombies (until whoever
    adopted them reaps them, which can take seconds in a container) do not count."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


def stop_group(proc: subprocess.Popen[bytes], grace: float = 0.0) -> None:
    """End `proc`'s process group: SIGTERM and up to `grace` s to exit (if `grace`), then SIGKILL."""
    if grace:
        _kill_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    _kill_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    # SIGKILL again until the whole group is gone (up to 5 s): _kill_group returns None, so it keeps polling
    poll(lambda: not _group_alive(proc.pid) or _kill_group(proc.pid, signal.SIGKILL), timeout=5, interval=0.05)


def _point_args_at_env(proc: subprocess.Popen[bytes], nargs: int, hidden: Mapping[int, str]) -> None:
    """With `proc` stopped at its exec (PTRACE_TRACEME), point argv[i] at the hidden values, then detach.

    `ps` shows the argument area copied at exec; argv[] (on the stack at `startstack`) points into
    it. Each hidden value travels in the owner-only environment, and argv[i] is pointed there.
    """
    try:
        _, status = os.waitpid(proc.pid, 0)
        if not os.WIFSTOPPED(status):
            proc.returncode = os.waitstatus_to_exitcode(status)
            raise OSError("the child did not stop at exec")
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is field 3 of proc(5)
        startstack, arg_start = int(fields[28 - 3]), int(fields[48 - 3])
        env_start, env_end = int(fields[50 - 3]), int(fields[51 - 3])
        word = struct.calcsize("P")
        with open(f"/proc/{proc.pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(startstack)
            argc, argv0 = struct.unpack("PP", mem.read(2 * word))
            if argc != nargs or argv0 != arg_start:
                raise OSError("unexpected initial stack layout")
            mem.seek(env_start)
            env = mem.read(env_end - env_start)
            for i in hidden:
                name = f"{_HIDDEN_ENV}{i}=".encode()
                at = 0 if env.startswith(name) else env.index(b"\0" + name) + 1
                mem.seek(startstack + word * (1 + i))
                mem.write(struct.pack("P", env_start + at + len(name)))
    finally:
        _LIBC.ptrace(_PTRACE_DETACH, proc.pid, None, None)


def _spawn_here(cmd: Sequence[str], hidden: Mapping[int, str], fsize_limit: int | None, death_signal: int,
                kwargs: dict[str, Any], umask: int | None = None) -> tuple[subprocess.Popen[bytes], bool]:
    parent = os.getpid()
    env = dict(kwargs.pop("env", None) or os.environ)
    env.update({f"{_HIDDEN_ENV}{i}": v for i, v in hidden.items()})

    def start(trace: bool) -> subprocess.Popen[bytes]:
        def preexec() -> None:  # in the child, between fork and exec
            _LIBC.prctl(_PR_SET_PDEATHSIG, death_signal)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
            if umask is not None:
                os.umask(umask)
            if fsize_limit is not None:
                hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
                lim = fsize_limit if hard == resource.RLIM_INFINITY else min(fsize_limit, hard)
                resource.setrlimit(resource.RLIMIT_FSIZE, (lim, lim))
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG
            if trace and _LIBC.ptrace(_PTRACE_TRACEME, 0, None, None) != 0:
                raise OSError(ctypes.get_errno(), "PTRACE_TRACEME refused")

        argv = list(cmd) if trace else [hidden.get(i, a) for i, a in enumerate(cmd)]
        return subprocess.Popen(argv, env=env, preexec_fn=preexec, start_new_session=True, **kwargs)

    if hidden:
        try:
            proc = start(trace=True)
        except subprocess.SubprocessError:  # preexec raised: ptrace is not allowed here
            proc = None
        if proc is not None:
            try:
                _point_args_at_env(proc, len(cmd), hidden)
                return proc, True
            except (OSError, ValueError):
                stop_group(proc)
        warnings.warn("could not keep the server key out of the process list (ptrace is not allowed "
                      "here): other local users can read it with ps", RuntimeWarning, stacklevel=4)
    return start(trace=False), False


class _Spawner:
    """Starts child processes from one daemon thread that lives as long as the process.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits: forking from a worker
    thread would kill the server when that thread ended.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._pid: int | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def _run(q: queue.Queue[Any]) -> None:
        while True:
            fn, future = q.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the spawner thread and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:
            return fn()
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child
                self._queue, self._pid = queue.Queue(), os.getpid()
                self._thread = threading.Thread(target=self._run, args=(self._queue,),
                                                name="batchlab-spawner", daemon=True)
                self._thread.start()
            q = self._queue
        future: Future[Any] = Future()
        q.put((fn, future))
        try:
            while not wait_futures([future], timeout=0.05).done:
                pass
        except BaseException:  # Ctrl-C or SIGTERM while spawning: finish (milliseconds), then undo
            wait_futures([future])
            if future.exception() is None and isinstance(future.result(), tuple):
                stop_group(future.result()[0])
            raise
        return future.result()


_SPAWNER = _Spawner()


def spawn(cmd: Sequence[str], *, hidden: Mapping[int, str] | None = None, fsize_limit: int | None = None,
          death_signal: int = signal.SIGKILL, umask: int | None = None,
          **popen_kwargs: Any) -> tuple[subprocess.Popen[bytes], bool]:
    """Start `cmd` in a new session, to get `death_signal` when this process dies; ``(process, hidden_ok)``.

    `hidden`: argument positions -> real values; `ps` shows the placeholders in `cmd` (without
    ptrace the real values are passed plainly, with a warning). `fsize_limit`: RLIMIT_FSIZE.
    """
    return _SPAWNER.call(lambda: _spawn_here(list(cmd), dict(hidden or {}), fsize_limit, death_signal,
                                             dict(popen_kwargs), umask))


# Each launch's reaper: when this process dies without stopping the server, it kills the server's
# group and removes the launch's folder and shared memory; meanwhile it sets the launch's regions
# (created 0644 whatever the umask) to 0600 every `REGION_CHMOD_S`. A Python process of its own
# (`-I -S`: the standard library only): a shell loop forked `find` and `sleep` at every tick,
# about 20 times the CPU of this loop on a 2-core machine with a few servers up.
REGION_CHMOD_S = 0.1
_REAPER = f"""
import os, shutil, signal, sys, time
pid, folder, prefix, uid = int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])  # argv[1]: its name

def each_region(act):  # an error (a region gone meanwhile, /dev/shm unreadable) skips, never stops the loop
    try:
        with os.scandir("/dev/shm") as it:
            found = [e for e in it if e.name.startswith(prefix)]
    except OSError:
        found = []
    for e in found:
        try:
            act(e)
        except OSError:
            pass

def private(e):
    st = e.stat(follow_symlinks=False)
    if st.st_uid == uid and st.st_mode & 0o077:
        os.chmod(e.path, 0o600)

def kill_group():
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass

def clean_up(signum, frame):
    kill_group()
    shutil.rmtree(folder, ignore_errors=True)
    each_region(lambda e: os.unlink(e.path))
    os._exit(0)

signal.signal(signal.SIGTERM, clean_up)
while os.path.exists(f"/proc/{{pid}}"):
    each_region(private)
    time.sleep({REGION_CHMOD_S})
kill_group()  # the server died on its own: end the stubs it left
"""


def reaper_command(pid: int, folder: str | os.PathLike[str], prefix: str, uid: int) -> list[str]:
    """The reaper of the server `pid` (a group leader) launched in `folder` with regions named `prefix`*."""
    return [sys.executable, "-I", "-S", "-c", _REAPER, "batchlab-reaper", str(pid), str(folder), prefix, str(uid)]


def _start_ticks(pid: int) -> int:
    """A process's start in clock ticks since boot (/proc/PID/stat field 22): unlike psutil's epoch
    create time, which adds a boot time read in whole seconds, no clock step moves it."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def _owner_tag() -> str:
    """'PID-START' of this process (START: `_start_ticks`)."""
    return f"{os.getpid()}-{_start_ticks(os.getpid())}"


def _owner_alive(pid: int, start: int) -> bool:
    try:
        return _start_ticks(pid) == start
    except (OSError, ValueError, IndexError):
        return False


def _cwd_in_use(folder: Path) -> bool:
    """True when a process of this user runs inside `folder` (a tritonserver's cwd is its folder)."""
    me = os.geteuid()
    for proc in psutil.process_iter(["uids"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.info["uids"] and proc.info["uids"].effective == me and Path(proc.cwd()) == folder:
                return True
    return False


_WORKDIR = re.compile(r"^batchlab-triton-(\d+)-(\d+)-")
_SHM_REGION = re.compile(r"^batchlab_(\d+)_(\d+)_")


def sweep_stale(tmp: str | os.PathLike[str] | None = None, shm: str | os.PathLike[str] = "/dev/shm") -> list[Path]:
    """Remove and return this user's server folders and shared memory whose owner process (named in
    the entry) is gone; a folder with no owner in its name only when no process of ours runs in it."""
    me = os.geteuid()
    removed: list[Path] = []
    for d in Path(tmp or tempfile.gettempdir()).glob("batchlab-triton-*"):
        try:
            st = d.lstat()
        except OSError:
            continue
        if st.st_uid != me or not d.is_dir() or d.is_symlink():
            continue
        m = _WORKDIR.match(d.name)
        if _owner_alive(int(m.group(1)), int(m.group(2))) if m else _cwd_in_use(d):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    for f in Path(shm).glob("batchlab_*"):
        m = _SHM_REGION.match(f.name)
        with contextlib.suppress(OSError):
            if m and f.lstat().st_uid == me and not _owner_alive(int(m.group(1)), int(m.group(2))):
                f.unlink()
                removed.append(f)
    return removed


_LIVE: "weakref.WeakSet[TritonServer]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


class TritonServer(_Clients):
    """One embedded tritonserver process on loopback, with its model repository.

    `repo` default: the course's; ports default to free ones; `model_control` "none" loads all,
    "explicit" (implied by `models`) only `models`; `stop_grace`: seconds from SIGTERM to SIGKILL (0:
    SIGKILL at once; a course server holds no state worth a graceful exit, which takes ~2 s);
    `owns_repo`: `stop()` also removes `repo` (staged for this server alone); `extra_args` go to
    tritonserver. The `RESTRICTED_APIS` need this launch's `key`, which the
    clients of `http_client()` / `grpc_client()` send; shared-memory regions are kept mode 0600.
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
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        stop_grace: float = 0.0,
        extra_args: Iterable[str] = (),
        log_verbose: int = 0,
        owns_repo: bool = False,
    ) -> None:
        self.repo = Path(repo).resolve() if repo is not None else MODEL_REPOSITORY
        self.owns_repo = owns_repo
        if model_control not in ("none", "explicit", "poll"):
            raise ValueError(f"model_control must be 'none', 'explicit' or 'poll', not {model_control!r}")
        if models and model_control == "none":
            model_control = "explicit"
        self.model_control = model_control
        self.requested_models = list(models or [])
        self._ports_given = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.extra_args = list(extra_args)
        self.log_verbose = log_verbose
        self.ports: dict[str, int] = {}
        self.models: list[str] = []
        self.key: str | None = None
        self.key_hidden = False
        self.shm_prefix: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._lock = threading.RLock()

    @property
    def pid(self) -> int | None:
        """Process id of tritonserver while it runs."""
        return self._proc.pid if self._proc and self.running else None

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def workdir(self) -> Path | None:
        """The launch's private folder (mode 0700: the server log and its working directory)."""
        return self._workdir

    def shm_regions(self) -> list[Path]:
        """The Python backend's shared-memory regions of this launch (one per model instance)."""
        return sorted(Path("/dev/shm").glob(self.shm_prefix + "*")) if self.shm_prefix else []

    def private_regions(self) -> list[Path]:
        """Set this launch's shared-memory regions that others can read to mode 0600; return them
        (`start` does it once, the reaper every `REGION_CHMOD_S`)."""
        fixed = []
        for path in self.shm_regions():
            with contextlib.suppress(OSError):
                st = path.stat()
                if st.st_uid == os.geteuid() and st.st_mode & 0o077:
                    os.chmod(path, 0o600)
                    fixed.append(path)
        return fixed

    @property
    def log_path(self) -> Path | None:
        """The server's log file while it exists."""
        return self._workdir / "tritonserver.log" if self._workdir else None

    def log(self) -> str:
        """The whole server log so far."""
        path = self.log_path
        return path.read_text(errors="replace") if path and path.exists() else ""

    def log_tail(self, n: int = 25) -> str:
        """The last `n` meaningful lines of the server log."""
        return _tail(self.log(), n)

    def _command(self, backend_dir: Path) -> tuple[list[str], dict[int, str]]:
        """The command line (with the key as a placeholder) and the hidden arguments' values."""
        cmd = [
            str(_pytriton_dist() / "bin" / "tritonserver"),
            f"--model-repository={self.repo}",
            f"--backend-directory={backend_dir}",
            f"--http-address={LOOPBACK}",
            f"--grpc-address={LOOPBACK}",
            f"--metrics-address={LOOPBACK}",
            f"--http-port={self.ports['http']}",
            f"--grpc-port={self.ports['grpc']}",
            f"--metrics-port={self.ports['metrics']}",
            f"--model-control-mode={self.model_control}",
            # On SIGTERM Triton waits this long, polling once a second, for in-flight requests and
            # model unloads; the group is killed after it anyway, so a longer wait only slows stop().
            "--exit-timeout-secs=1",
            "--strict-readiness=true",
            f"--log-verbose={self.log_verbose}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            "--grpc-infer-allocation-pool-size=0",
            # Every course config is complete (same config with and without this flag); without it
            # the Python backend starts an extra stub per model load only to ask for completions.
            "--disable-auto-complete-config",
        ]
        cmd += [f"--load-model={m}" for m in self.requested_models]
        hidden = {}
        apis = ",".join(RESTRICTED_APIS)
        for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
            hidden[len(cmd)] = f"{flag}={apis}:{KEY_HEADER}={self.key}"
            cmd.append(f"{flag}={apis}:{KEY_HEADER}={_HIDDEN}")
        cmd += self.extra_args
        return cmd, hidden

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
        """Start the server, wait until it and its models are ready, return self; interrupted: stop, re-raise."""
        with self._lock:
            if self.running:
                return self
            self._check_repo()
            sweep_stale()
            for what, port in self._ports_given.items():
                if port is not None:
                    check_port_free(port, what)
            backend_dir = prepare_backend_dir()
            attempts = 1 if all(self._ports_given.values()) else 3
            for attempt in range(attempts):
                given = self._ports_given
                fresh = iter(p for p in free_ports(len(given) * 2) if p not in given.values())
                self.ports = {k: (v if v is not None else next(fresh)) for k, v in given.items()}
                # 127.0.0.1:PORT each; not set before the first start (`load.check_server` tells)
                self.http_url, self.grpc_url, self.metrics_url = (f"{LOOPBACK}:{p}" for p in self.ports.values())
                try:
                    self._launch(backend_dir)
                    break
                except PortInUseError:
                    if attempt == attempts - 1:
                        raise
            return self

    def _server_env(self) -> dict[str, str]:
        """Environment for tritonserver: the wheel's libraries, and this Python (first on PATH, its
        libpython first on LD_LIBRARY_PATH) for the stubs, so every model imports this venv's packages."""
        env = dict(os.environ)
        libs = [str(_pytriton_dist().parent.parent / "nvidia_pytriton.libs")]
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
        # Each stub's OpenBLAS would start one thread per core, only for the model to set its own
        # `blas_threads` (default 1) right after: starting with one saves those threads' start-up.
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        reset = self._workdir / "stub-env.sh"
        before = env.get("GLIBC_TUNABLES")
        reset.write_text(f"export GLIBC_TUNABLES={shlex.quote(before)}\n" if before else "unset GLIBC_TUNABLES\n")
        env["GLIBC_TUNABLES"] = f"{before}:{_SERVER_TUNABLES}" if before else _SERVER_TUNABLES
        env["BASH_ENV"] = str(reset)  # read by the `bash -c` that starts each Python stub
        return env

    def _launch(self, backend_dir: Path) -> None:
        tag = _owner_tag()
        self.key = secrets.token_urlsafe(24)
        self.shm_prefix = f"batchlab_{tag.replace('-', '_')}_{secrets.token_hex(4)}_"
        self._workdir = Path(tempfile.mkdtemp(prefix=f"batchlab-triton-{tag}-"))  # mode 0700
        try:
            logfd = os.open(self._workdir / "tritonserver.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                cmd, hidden = self._command(backend_dir)
                self._proc, self.key_hidden = spawn(
                    cmd, hidden=hidden, fsize_limit=SHM_LIMIT_BYTES, stdin=subprocess.DEVNULL,
                    stdout=logfd, stderr=subprocess.STDOUT, env=self._server_env(), cwd=self._workdir,
                    umask=0o077)  # what it creates itself is ours alone
            finally:
                os.close(logfd)
            _LIVE.add(self)
            self._reaper, _ = spawn(reaper_command(self._proc.pid, self._workdir, self.shm_prefix, os.geteuid()),
                                    death_signal=signal.SIGTERM,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.models = wait_until_ready(self.http_url, self.startup_timeout, alive=lambda: self.running,
                                           key=self.key, own=True)
            self.private_regions()
            index = repository_index(self.http_url, key=self.key)
            broken = [m for m in index if m.get("state") == "UNAVAILABLE"]
            if broken:
                raise ModelLoadError(
                    "; ".join(f"model '{m['name']}' failed to load: {m.get('reason', '')}" for m in broken)
                )
        except PortInUseError:
            self.stop()
            raise
        except (ServerError, TimeoutError) as exc:
            log = self.log()
            if isinstance(exc, TimeoutError):
                cls, cause = ServerError, str(exc)
            else:
                cls, cause = (ModelLoadError, str(exc)) if isinstance(exc, ModelLoadError) else diagnose(log)
            self.stop()
            raise cls(f"tritonserver failed to start: {cause}\n--- last lines of the server log ---\n{_tail(log)}") from None
        except BaseException:  # KeyboardInterrupt, a signal handler's exception: leave nothing behind
            self.stop()
            raise

    def stop(self) -> None:
        """Kill the server's process group (SIGKILL; with a `stop_grace`, SIGTERM and up to that long first);
        remove its folder and regions."""
        with self._lock:
            proc, self._proc = self._proc, None
            reaper, self._reaper = self._reaper, None
            if proc is not None:
                stop_group(proc, self.stop_grace)
            if reaper is not None:  # only now: should this process die while stopping, it cleans up
                stop_group(reaper)
            for path in self.shm_regions():
                with contextlib.suppress(OSError):
                    path.unlink()
            _LIVE.discard(self)
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None
            if self.owns_repo:
                shutil.rmtree(self.repo, ignore_errors=True)

    def __repr__(self) -> str:
        state = f"running on {self.http_url}" if self.running else "stopped"
        return f"<TritonServer {state}, repo={self.repo}, models={self.models}>"


class ExternalServer(_Clients):
    """A Triton server someone else runs (`make start`, a container): `TritonServer`'s interface, but
    `start` only waits for it and `stop` does nothing. `key`: its key, if it restricts APIs."""

    def __init__(self, http_url: str, grpc_url: str | None = None, metrics_url: str | None = None,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, key: str | None = None,
                 needs: Sequence[str] = ()) -> None:
        def strip(u: str) -> str:
            return re.sub(r"^[a-z]+://", "", u).rstrip("/")

        self.http_url = strip(http_url)
        host, _, port = self.http_url.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"TRITON_URL must look like host:port, not {http_url!r}")
        self.grpc_url = strip(grpc_url) if grpc_url else f"{host}:{int(port) + 1}"
        self.metrics_url = strip(metrics_url) if metrics_url else f"{host}:{int(port) + 2}"
        self.startup_timeout = startup_timeout
        self.key = key or None
        self.needs = list(needs)
        self.models: list[str] = []
        self.running = False

    @classmethod
    def from_env(cls, needs: Sequence[str] = ()) -> "ExternalServer | None":
        """An `ExternalServer` from TRITON_URL / TRITON_GRPC_URL / TRITON_METRICS_URL / BATCHLAB_TRITON_KEY, or None."""
        url = os.environ.get("TRITON_URL")
        if not url:
            return None
        return cls(url, os.environ.get("TRITON_GRPC_URL"), os.environ.get("TRITON_METRICS_URL"),
                   key=os.environ.get(KEY_ENV), needs=needs)

    def start(self) -> "ExternalServer":
        """Wait until the external server is ready; ServerError unless it serves every model in `needs`."""
        try:
            self.models = wait_until_ready(self.http_url, self.startup_timeout, key=self.key, silent_s=10.0)
        except (TimeoutError, ServerError) as exc:
            raise ServerError(f"the Triton server at TRITON_URL={self.http_url} is not ready: {exc}") from None
        missing = [m for m in self.needs if m not in self.models]
        if missing:
            raise ServerError(f"the server at TRITON_URL does not serve {', '.join(missing)} "
                              f"(it has {', '.join(self.models) or 'none'})")
        self.running = True
        return self

    def stop(self) -> None:
        """Nothing to stop: the server belongs to someone else."""
        self.running = False

    def log_tail(self, n: int = 25) -> str:
        """An external server's log is not ours to read."""
        return "(external server: read its own log)"

    def __repr__(self) -> str:
        return f"<ExternalServer {self.http_url}, models={self.models}>"


def connect(repo: str | os.PathLike[str] | None = None, *, models: Sequence[str] | None = None,
            private: bool = False, **kwargs: Any) -> TritonServer | ExternalServer:
    """The course's one way to get a server: the TRITON_URL server (it must serve `models`) unless `private`,
    else an embedded one on `repo` loading `models` (default: all) with `kwargs` (``owns_repo=True``: a staged
    repository, removed on stop). Use it in ``with``, or `.start()` then `.stop()`: stops only its own."""
    external = None if private else ExternalServer.from_env(needs=models or ())
    return external if external is not None else TritonServer(repo, models=models, **kwargs)


class Interrupted(BaseException):
    """Raised by the signal handler of a command line while it is still starting up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """Handle SIGINT/SIGTERM for a command line: raise `Interrupted` (once) until the returned
    function marks startup done, then set `stop`."""
    state = {"started": False, "interrupted": False}

    def on_signal(signum: int, frame: object) -> None:
        if state["started"] or state["interrupted"]:
            stop.set()
            return
        state["interrupted"] = True
        raise Interrupted(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return lambda: state.update(started=True)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print one JSON line (with the key) once ready, run until SIGINT/SIGTERM (while starting: 128 + signum)."""
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
    p.add_argument("--timeout", type=float, default=DEFAULT_STARTUP_TIMEOUT_S, help="seconds to wait for readiness")
    p.add_argument("--check", action="store_true", help="start, print the JSON line, stop, exit 0")
    p.add_argument("--log-verbose", type=int, default=0)
    args = p.parse_args(argv)
    stop = threading.Event()
    started = stop_on_signals(stop)
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
        try:
            server.start()
            started()
        except (ServerError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except Interrupted as exc:
            print(f"{exc} during startup: stopped, nothing left running", file=sys.stderr)
            return 128 + exc.signum
        print(json.dumps({**server.info(), "key": server.key}), flush=True)
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
