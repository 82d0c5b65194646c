"""Closed-loop load: N asyncio tasks on one connection, each sending its next request as soon as its
last one is answered, so the throughput is what the server sustains at concurrency N.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from batchlab._validate import count, non_negative, optional_count
from batchlab.load.records import RequestRecord
from batchlab.load.report import LoadReport
from batchlab.load.runner import measure, run_all, run_sync
from batchlab.load.transport import now
from batchlab.load.workload import RequestSource, as_factory


async def drive_closed(transport: Any, factory: Any, concurrency: int, n_requests: int | None,
                       duration_s: float | None, records: list[RequestRecord], t_start: float,
                       token_times: bool = False) -> None:
    """Run `concurrency` workers until `n_requests` were sent or `duration_s` passed, then drain."""
    deadline = t_start + duration_s if duration_s is not None else math.inf
    indices = itertools.count()  # shared by the workers: each request index is sent once

    async def worker() -> None:
        for i in indices:
            if (n_requests is not None and i >= n_requests) or now() >= deadline:
                return
            rec = RequestRecord(index=i, sent=math.nan, token_times=[] if token_times else None)
            await transport.execute(factory(i), rec)
            records.append(rec)

    await run_all([worker() for _ in range(concurrency)])


def run_closed_loop(server: Any, model: str, requests: RequestSource, *, concurrency: int = 1,
                    n_requests: int | None = None, duration_s: float | None = None,
                    warmup_requests: int = 0, warmup_s: float = 0.0, protocol: str = "grpc",
                    request_timeout_s: float = 60.0, stats: bool = True, metrics: bool = False,
                    progress: bool | None = None, record_token_times: bool = False,
                    label: str = "") -> LoadReport:
    """Closed-loop load at fixed `concurrency` (blocking; works in scripts and inside Jupyter) until
    `n_requests` and/or `duration_s` (whichever first), after a left-out warm-up of `warmup_requests`
    and/or `warmup_s`. `protocol`: 'grpc', 'http' or 'grpc-stream'; `stats` / `metrics`: read the
    statistics extension / Prometheus before and after; `progress` None: a bar after 3 s.
    """
    count("concurrency", concurrency)
    if n_requests is None and duration_s is None:
        raise ValueError("bound the run: give n_requests and/or duration_s")
    optional_count("n_requests", n_requests, lo=0)
    if duration_s is not None:
        non_negative("duration_s", duration_s)
    if warmup_requests < 0 or warmup_s < 0:
        raise ValueError("warmup_requests and warmup_s must be >= 0")
    factory = as_factory(requests)
    warm = None
    if warmup_requests or warmup_s:
        async def warm(tr: Any, recs: list[RequestRecord], t0: float) -> None:
            await drive_closed(tr, factory, concurrency, warmup_requests or None, warmup_s or None, recs, t0)

    async def drive(tr: Any, recs: list[RequestRecord], t0: float) -> None:
        await drive_closed(tr, factory, concurrency, n_requests, duration_s, recs, t0, record_token_times)

    return run_sync(lambda: measure(server, model, protocol, drive=drive, warmup=warm, mode="closed",
                                    total=n_requests, stats=stats, metrics=metrics, progress=progress,
                                    request_timeout_s=request_timeout_s, label=label, concurrency=concurrency))
