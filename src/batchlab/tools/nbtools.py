"""`python -m batchlab.tools.nbtools execute NOTEBOOK...`: execute notebooks in place, outputs stored."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import nbformat
from nbclient import NotebookClient
from nbformat.v4.rwbase import rejoin_lines

from batchlab.course.claims import STRICT_ENV
from batchlab.paths import read_notebook


def execute(path: str | Path, timeout: int = 300, allow_errors: bool = False) -> float:
    """Run every cell of the notebook at `path` in a fresh kernel, store the outputs; the wall time (s)."""
    path = Path(path)
    nb = rejoin_lines(nbformat.from_dict(read_notebook(path)))  # as nbformat.read: sources as strings
    os.environ[STRICT_ENV] = "strict"  # a claim that does not hold is not stored as the chapter's output
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            store_widget_state=False,  # widget state is megabytes; the text repr is kept
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    nbformat.write(nb, path)
    return elapsed


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: `execute PATH...` runs and stores each notebook, printing its time."""
    p = argparse.ArgumentParser(prog="python -m batchlab.tools.nbtools")
    ex = p.add_subparsers(dest="cmd", required=True).add_parser("execute", help="execute notebooks in place")
    ex.add_argument("paths", nargs="+")
    ex.add_argument("--timeout", type=int, default=300)
    args = p.parse_args(argv)
    status = 0
    for nb in args.paths:
        try:
            print(f"{nb}: executed in {execute(nb, timeout=args.timeout):.1f} s")
        except Exception as exc:  # report and continue with the next notebook
            first = str(exc).strip().splitlines()
            print(f"{nb}: FAILED: {first[-1] if first else type(exc).__name__}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
