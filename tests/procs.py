"""Process helpers the tests share: a process tree, and what of it is still running."""

from __future__ import annotations

import psutil


def process_tree(pid: int | None) -> list[psutil.Process]:
    """A process and all its descendants (empty if it is gone)."""
    if pid is None:
        return []
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def still_running(procs: list[psutil.Process], timeout: float = 0.0) -> list[psutil.Process]:
    """Those of `procs` running (not zombies) after waiting up to `timeout` s for them to end; one
    that exits while being asked counts as gone."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    left = []
    for p in alive:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            continue
    return left
