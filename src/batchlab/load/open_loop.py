"""Open-loop load: requests sent at times fixed in advance (Poisson at rate λ, or any schedule),
never waiting for earlier answers, so a slow server cannot slow the arrivals. A client that fell
behind its schedule is said so in the report and warned (`ClientFellBehind`).
"""

from __future__ import annotations

import asyncio
import math
import warnings
from typing import Any, Sequence

import numpy as np

from batchlab.load.records import RequestRecord
from batchlab.load.report import ClientFellBehind, LoadReport
from batchlab.load.runner import measure, run_sync
from batchlab.load.transport import now
from batchlab.load.workload import RequestSource, as_factory, poisson_arrivals

SPIN_S = 0.0005  # Arrivals due within this many seconds are sent now rather than after another sleep.


async def drive_open(transport: Any, factory: Any, arrivals: np.ndarray, records: list[RequestRecord],
                     t_start: float, token_times: bool = False) -> None:
    """Send request i at ``t_start + arrivals[i]``, never waiting for answers; then drain."""
    tasks: set[asyncio.Task] = set()
    loop = asyncio.get_running_loop()
    errors: list[BaseException] = []

    async def one(i: int, t: float) -> None:
        rec = RequestRecord(index=i, sent=math.nan, scheduled=t, token_times=[] if token_times else None)
        await transport.execute(factory(i), rec)
        records.append(rec)

    def done(task: asyncio.Task) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            errors.append(task.exception())

    for i, t in enumerate(arrivals):
        if errors:
            break
        delay = t_start + float(t) - now()
        if delay > SPIN_S:
            await asyncio.sleep(delay - SPIN_S / 2)
        task = loop.create_task(one(i, float(t)))
        tasks.add(task)
        task.add_done_callback(done)
    while tasks:
        await asyncio.wait(set(tasks))
    if errors:
        raise errors[0]


def _arrivals(rate: float | None, arrivals: Sequence[float] | None, n_requests: int | None,
              duration_s: float | None, seed: int) -> np.ndarray:
    if arrivals is not None:
        if rate is not None:
            raise ValueError("give either rate or arrivals, not both")
        a = np.asarray(arrivals, dtype=float)
        if a.ndim != 1 or (a.size and (np.any(np.diff(a) < 0) or a[0] < 0 or not np.all(np.isfinite(a)))):
            raise ValueError("arrivals must be a 1-D sequence of non-negative, non-decreasing send times (s)")
        if n_requests is not None:
            a = a[:n_requests]
        if duration_s is not None:
            a = a[a < duration_s]
        return a
    if rate is None:
        raise ValueError("give rate (requests per second) or arrivals (send times)")
    return poisson_arrivals(rate, n=n_requests, duration=duration_s, seed=seed)


def run_open_loop(server: Any, model: str, requests: RequestSource, *, rate: float | None = None,
                  arrivals: Sequence[float] | None = None, n_requests: int | None = None,
                  duration_s: float | None = None, seed: int = 0, warmup_s: float = 0.0,
                  protocol: str = "grpc", request_timeout_s: float = 60.0, stats: bool = True,
                  metrics: bool = False, progress: bool | None = None,
                  record_token_times: bool = False, label: str = "", warn: bool = True) -> LoadReport:
    """Open-loop load (blocking; works in scripts and inside Jupyter): seeded Poisson arrivals at
    `rate` req/s (bounded by `n_requests` and/or `duration_s`) or an `arrivals` schedule (s from the
    start), after a left-out warm-up of `warmup_s` s at the same rate. With `warn`, a client that
    fell behind warns `ClientFellBehind` (the report's Chinese `rate_note`). Other arguments as for
    `run_closed_loop`.
    """
    sched = _arrivals(rate, arrivals, n_requests, duration_s, seed)
    if warmup_s < 0:
        raise ValueError("warmup_s must be >= 0")
    factory = as_factory(requests)
    offered = rate if rate is not None else (len(sched) / sched[-1] if len(sched) > 1 and sched[-1] > 0 else None)
    warm = None
    if warmup_s and offered:
        warm_sched = poisson_arrivals(offered, duration=warmup_s, seed=seed + 7919)

        async def warm(tr: Any, recs: list[RequestRecord], t0: float) -> None:
            await drive_open(tr, factory, warm_sched, recs, t0)

    async def drive(tr: Any, recs: list[RequestRecord], t0: float) -> None:
        await drive_open(tr, factory, sched, recs, t0, record_token_times)

    report = run_sync(lambda: measure(server, model, protocol, drive=drive, warmup=warm, mode="open",
                                      total=len(sched), stats=stats, metrics=metrics, progress=progress,
                                      request_timeout_s=request_timeout_s, label=label, offered_rate=offered))
    note = report.rate_note() if warn else None
    if note:
        warnings.warn(note, ClientFellBehind, stacklevel=2)
    return report
