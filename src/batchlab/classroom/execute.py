"""`python -m batchlab.classroom.execute IN OUT --cell-timeout S --memory-mb M` (runs in the sandbox):
a fresh kernel runs each cell past errors; OUT's ``batchlab_execution`` metadata says where it stopped, why."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

import nbformat
import psutil
from nbclient import NotebookClient
from nbformat.v4.rwbase import rejoin_lines
from nbclient.exceptions import DeadKernelError

from batchlab.labs._core import GRADING_ENV
from batchlab.paths import read_notebook


def _tree(root: int) -> tuple[list[psutil.Process], float]:
    """(process `root` and all its descendants, their resident memory in MiB)."""
    try:
        procs = [psutil.Process(root)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return [], 0.0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return procs, total / 2 ** 20


def _watch(client: NotebookClient, limit_mb: float, state: dict, stop: threading.Event) -> None:
    """Kill the kernel's process tree once it uses more than `limit_mb` (checked every 0.5 s)."""
    while not stop.wait(0.5):
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        procs, mb = _tree(pid) if pid else ([], 0.0)
        if mb > limit_mb:
            state["reason"] = f"memory: the kernel's processes used more than {limit_mb:.0f} MiB"
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            return


def execute_notebook(src: Path, dst: Path, cell_timeout: int, memory_mb: float) -> dict:
    """Run `src`, write the executed notebook to `dst`, return the summary."""
    nb = rejoin_lines(nbformat.from_dict(read_notebook(src)))  # as nbformat.read: sources as strings
    os.environ[GRADING_ENV] = "1"
    client = NotebookClient(nb, timeout=cell_timeout, interrupt_on_timeout=True, allow_errors=True,
                            kernel_name="python3", resources={"metadata": {"path": str(src.parent)}},
                            startup_timeout=120)
    state: dict = {"reason": ""}
    stop = threading.Event()
    t0 = time.monotonic()
    ran = 0
    try:
        with client.setup_kernel():
            watcher = threading.Thread(target=_watch, args=(client, memory_mb, state, stop), daemon=True)
            watcher.start()
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
                ran = index + 1
    except DeadKernelError:
        state["reason"] = state["reason"] or "the kernel died"
    except Exception as exc:  # nbclient gave up (kernel unresponsive): keep what ran
        state["reason"] = state["reason"] or f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        stop.set()
    summary = {"cells": len(nb.cells), "ran": ran, "stopped_at": None if ran == len(nb.cells) else ran,
               "reason": state["reason"], "seconds": round(time.monotonic() - t0, 1)}
    nb.metadata["batchlab_execution"] = summary
    nbformat.write(nb, dst)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (see module docstring)."""
    p = argparse.ArgumentParser(prog="python -m batchlab.classroom.execute")
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--cell-timeout", type=int, default=300)
    p.add_argument("--memory-mb", type=float, default=2048)
    args = p.parse_args(argv)
    print(json.dumps(execute_notebook(args.src, args.dst, args.cell_timeout, args.memory_mb)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
