"""Shared by the benchmarks: the server they measure, the embed workload, output and errors."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import signal
import sys
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import psutil

from batchlab.config_pbtxt import load_config_text, parse_config
from batchlab.load import RequestSpec
from batchlab.load.report import json_ready
from batchlab.models.requests import random_embed_inputs
from batchlab.server import ServerError, connect


class BenchError(Exception):
    """A benchmark cannot run (missing model, server failure); the CLI prints it in one line."""


STOPPED_ANSWERING = ("deadline exceeded", "client timeout", "connection refused", "failed to connect")
"""Lower-case fragments of the errors a server that stopped answering gives."""


def require_answers(rep: Any, what: str) -> Any:
    """`rep` when its server kept answering; BenchError (one line) when every request failed or any
    failed as in `STOPPED_ANSWERING`."""
    kinds = rep.records.errors()
    stuck = [k for k in kinds if any(f in k.lower() for f in STOPPED_ANSWERING)]
    if stuck or (rep.n and rep.n_ok == 0):
        first = (stuck or list(kinds) or ["no answer"])[0]
        raise BenchError(f"{what}: {rep.n_errors} of {rep.n} requests failed ({first}); the server stopped "
                         "answering: rerun the benchmark")
    return rep


def log(msg: str) -> None:
    """Progress for the human: stderr only (stdout carries exactly one JSON object)."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def bench_server(models: Sequence[str], **kwargs: Any) -> Iterator[Any]:
    """The server to measure (`batchlab.server.connect`), its errors as one-line `BenchError`s."""
    try:
        server = connect(models=list(models), **kwargs).start()
    except (ServerError, ValueError) as exc:
        raise BenchError(str(exc).splitlines()[0]) from None
    try:
        yield server
    except Exception:
        if not server.running:  # read how it ended before stop() removes its folder and log
            raise BenchError(server_gone(server)) from None
        raise
    finally:
        server.stop()


def server_gone(server: Any) -> str:
    """One line on an embedded server that is no longer running: its exit status or signal, and its log's last line."""
    proc = getattr(server, "_proc", None)  # the Popen of a TritonServer that has exited (stop() clears it)
    rc = proc.poll() if proc is not None else None
    how = (f"killed by {signal.Signals(-rc).name}" if rc is not None and rc < 0 else
           f"exited with status {rc}" if rc is not None else "stopped")
    tail = server.log_tail(3).strip().splitlines()
    return (f"the embedded tritonserver went away during the run ({how}); last line of its log: "
            f"{tail[-1] if tail else '(no log: its folder is gone)'}")


def embed_prompts(n: int, length: int = 16, seed: int = 0) -> np.ndarray:
    """`n` fixed-length prompts of real (non-pad, non-special) token ids for `embed`, (n, length) int32."""
    return random_embed_inputs(n, length, seed, low=3)["TOKENS"]


def row_source(rows: np.ndarray, name: str, output: str) -> Callable[[int], RequestSpec]:
    """Request i sends ``rows[i % n]`` (batch of 1) as input `name` and asks for `output`."""
    specs = [RequestSpec({name: rows[k:k + 1]}, outputs=(output,)) for k in range(len(rows))]
    return lambda i: specs[i % len(specs)]


def embed_source(prompts: np.ndarray) -> Callable[[int], RequestSpec]:
    """Request i sends prompts[i % n] to `embed`."""
    return row_source(prompts, "TOKENS", "EMBEDDING")


def int_parameters(model: str, keys: Sequence[str]) -> dict[str, int]:
    """Integer `parameters` of a course model's config.pbtxt."""
    params = parse_config(load_config_text(model)).parameters
    return {k: int(params[k].string_value) for k in keys}


def emit(obj: dict[str, Any]) -> None:
    """Print the one JSON object (NaN as null)."""
    print(json.dumps(json_ready(obj), ensure_ascii=False, indent=2))


def r3(x: float) -> float:
    """Round for display (3 significant decimals)."""
    return float(round(x, 3)) if isinstance(x, (int, float)) and math.isfinite(x) else x


def machine(watch: "CpuWatch | None" = None) -> dict[str, Any]:
    """What the figures were measured on (and, with a `CpuWatch`, what else was running)."""
    out = {"cpus": os.cpu_count(), "load_avg_1m": r3(os.getloadavg()[0]), "python": platform.python_version(),
           "platform": platform.machine()}
    if watch is not None:
        out.update(watch.result())
    return out


def _cpu_busy_s() -> float:
    """CPU seconds all CPUs spent neither idle nor waiting for I/O since boot."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal


def _group_cpu_s(pgids: set[int], pids: set[int]) -> float:
    """User + system CPU seconds of every live process in the process groups `pgids` or with a pid in `pids`."""
    total = 0.0
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.pid in pids or os.getpgid(proc.pid) in pgids:
                total += sum(proc.cpu_times()[:2])
    return total


class CpuWatch:
    """Average CPU cores used during a benchmark by this process and its server's process group, and by
    everything else (Linux /proc; elsewhere it reports nothing)."""

    def __init__(self, server: Any = None) -> None:
        pid = getattr(server, "pid", None)
        self.pgids = {pid} if pid else set()
        self.pids = {os.getpid()}
        self.ok = os.path.exists("/proc/stat")

    def __enter__(self) -> "CpuWatch":
        if self.ok:
            self.t0 = time.monotonic()
            self.load0 = os.getloadavg()[0]
            self.busy0 = _cpu_busy_s()
            self.ours0 = _group_cpu_s(self.pgids, self.pids)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ok:
            self.t1 = time.monotonic()
            self.busy1 = _cpu_busy_s()
            self.ours1 = _group_cpu_s(self.pgids, self.pids)

    def result(self) -> dict[str, Any]:
        """Average CPU cores used by the benchmark (client + server) and by other processes."""
        if not self.ok or not hasattr(self, "t1"):
            return {}
        wall = max(self.t1 - self.t0, 1e-9)
        busy = (self.busy1 - self.busy0) / wall
        ours = max(self.ours1 - self.ours0, 0) / wall
        return {"cpu_cores_used_by_benchmark": r3(ours), "cpu_cores_used_by_other_processes": r3(max(busy - ours, 0.0)),
                "load_avg_1m_at_start": r3(self.load0)}


BUSY_CORES = 0.3
"""Other processes using more than this many CPU cores on average make a run too noisy to claim a goal."""


def verdict(measured_met: bool, mach: dict[str, Any]) -> dict[str, Any]:
    """The goal fields of a benchmark's JSON: `goal_met` only when `measured_met` and the machine was quiet
    (`mach` = `machine(watch)`: other processes used <= `BUSY_CORES`); `goal_met_as_measured` keeps the figures'."""
    other = mach.get("cpu_cores_used_by_other_processes")
    if other is None:
        quiet, why = False, "machine load not measured (no /proc): goal not claimed"
    elif other > BUSY_CORES:
        quiet, why = False, (f"machine busy: other processes used {other:.2f} cores (> {BUSY_CORES}) during the run; "
                             "the figures cannot decide the goal: rerun on a quiet machine")
    else:
        quiet, why = True, f"machine quiet: other processes used {other:.2f} cores (<= {BUSY_CORES})"
    met = bool(measured_met)
    if quiet:
        why += "; goal " + ("met" if met else "not met")
    else:
        why += "; as measured the goal would be " + ("met" if met else "not met")
    return {"goal_met": bool(met and quiet), "goal_met_as_measured": met, "machine_busy": not quiet,
            "busy_threshold_cores": BUSY_CORES, "goal_verdict": why}


class Timer:
    """Wall-clock seconds since creation."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.t0
