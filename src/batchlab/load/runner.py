"""What every load run shares: warm-up, server snapshots, client CPU, progress bar, and running the
asyncio code from plain Python or inside Jupyter's event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import time
import urllib.parse
from typing import Any, Awaitable, Callable, TypeVar

import numpy as np

from batchlab.load.metrics import MetricsSnapshot, scrape
from batchlab.load.records import Records, RequestRecord
from batchlab.load.report import LoadReport
from batchlab.load.stats import ModelStats, read_stats, settle
from batchlab.load.streams import StreamTransport
from batchlab.load.transport import GrpcTransport, HttpTransport, Transport
from batchlab.server import ServerError, _http, repository_index

T = TypeVar("T")

TRANSPORTS = {"grpc": (GrpcTransport, "grpc_url"), "http": (HttpTransport, "http_url"),
              "grpc-stream": (StreamTransport, "grpc_url")}  # protocol -> transport, the server address it uses

PROGRESS_AFTER_S = 3.0  # With ``progress=None`` a bar appears once a run has lasted this long.


def check_server(server: Any) -> None:
    """Raise a clear ValueError unless `server` has the addresses a load run needs."""
    for attr in ("grpc_url", "http_url"):
        if not isinstance(getattr(server, attr, None), str):
            raise ValueError(f"server must be a started TritonServer or an ExternalServer (missing {attr})")


def check_model_ready(http_url: str, model: str, timeout: float = 10.0, key: str | None = None) -> None:
    """ValueError naming `model` and the ready models unless it is ready; `key` opens the repository
    index (a restricted API)."""
    try:
        code, _ = _http("GET", f"http://{http_url}/v2/models/{urllib.parse.quote(model)}/ready", timeout)
    except OSError as exc:
        raise ValueError(f"no Triton server answers at {http_url}: {exc}") from None
    if code == 200:
        return
    try:
        ready = sorted(m["name"] for m in repository_index(http_url, key) if m.get("state") == "READY")
    except (ServerError, OSError, ValueError):
        ready = []
    raise ValueError(f"model {model!r} is not ready on the server at {http_url} (ready: {', '.join(ready) or 'none'})")


async def snapshot(server: Any, model: str, stats: bool, metrics: bool) -> tuple[ModelStats | None, MetricsSnapshot | None]:
    """Read the statistics extension and/or scrape the metrics endpoint (off the event loop)."""
    st = await asyncio.to_thread(read_stats, server.http_url, model) if stats else None
    murl = getattr(server, "metrics_url", None)
    me = await asyncio.to_thread(scrape, murl) if metrics and murl else None
    return st, me


async def show_progress(mode: bool | None, total: int | None, desc: str, records: list[RequestRecord],
                        stop: asyncio.Event, every: float = 0.25) -> None:
    """A tqdm.auto bar of the growing `records` list until `stop` is set; `mode` False: never, True: at
    once, None: once the run lasted `PROGRESS_AFTER_S`."""
    bar, t0 = None, time.monotonic()
    while not stop.is_set():
        if bar is None and (mode or (mode is None and time.monotonic() - t0 >= PROGRESS_AFTER_S)):
            from tqdm.auto import tqdm  # only once a bar is due: tqdm.auto probes for Jupyter widgets

            bar = tqdm(total=total, desc=desc, unit="req", file=sys.stderr, leave=False, dynamic_ncols=True)
        if bar is not None:
            bar.update(len(records) - bar.n)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
    if bar is not None:
        bar.close()


async def run_all(coros: list[Awaitable[None]]) -> None:
    """Await coroutines concurrently; if one raises, cancel the others and re-raise (py3.10-safe)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            if t.exception() is not None:
                raise t.exception()
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run_sync(make_coro: Callable[[], Awaitable[T]]) -> T:
    """Run an async load run to completion from synchronous code (in a helper thread with its own
    loop when one already runs here, as in Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coro())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batchlab-load") as pool:
        return pool.submit(lambda: asyncio.run(make_coro())).result()  # its exception re-raised here


def make_transport(protocol: str, server: Any, model: str, request_timeout_s: float = 60.0) -> Transport:
    """The transport for `protocol` ('grpc', 'http' or 'grpc-stream') to `server`'s endpoint."""
    if protocol not in TRANSPORTS:
        raise ValueError(f"protocol must be one of {', '.join(TRANSPORTS)}, not {protocol!r}")
    cls, address = TRANSPORTS[protocol]
    return cls(getattr(server, address), model, request_timeout_s)


def _served(protocol: str, recs: Records) -> int:
    """Requests the server counts for these records: one per stream request with grpc-stream, else
    one per answered call or sequence step."""
    return int(recs.ok.sum()) if protocol == "grpc-stream" else int(recs.responses.sum())


Driver = Callable[[Any, list[RequestRecord], float], Awaitable[None]]
"""A phase: given an open transport, a list to append records to, and its start time (perf_counter)."""


async def measure(server: Any, model: str, protocol: str, *, drive: Driver, warmup: Driver | None,
                  mode: str, total: int | None, stats: bool, metrics: bool, progress: bool | None,
                  request_timeout_s: float, label: str = "", concurrency: int | None = None,
                  offered_rate: float | None = None) -> LoadReport:
    """Warm up (drained before the first snapshot), snapshot the server, run the measured phase,
    snapshot again, build the report."""
    check_server(server)
    await asyncio.to_thread(check_model_ready, server.http_url, model, 10.0, getattr(server, "key", None))
    transport = make_transport(protocol, server, model, request_timeout_s)
    await transport.open()
    try:
        if warmup is not None:
            pre, _ = await snapshot(server, model, stats, False)
            warm: list[RequestRecord] = []
            await warmup(transport, warm, time.perf_counter())
            if pre is not None:  # Triton counts a request after its answer is out: let the warm-up land
                await asyncio.to_thread(settle, lambda: read_stats(server.http_url, model), pre,
                                 _served(protocol, Records.from_list(warm)))
        st0, me0 = await snapshot(server, model, stats, metrics)
        records: list[RequestRecord] = []
        stop = asyncio.Event()
        ticker = asyncio.ensure_future(show_progress(progress, total, label or model, records, stop))
        cpu0 = time.process_time()  # all threads: the client's cost
        t_start = time.perf_counter()
        try:
            await drive(transport, records, t_start)
        finally:
            stop.set()
            await ticker
        cpu = time.process_time() - cpu0
        recs = Records.from_list(records)
        done = recs.last[np.isfinite(recs.last)]
        wall = float(done.max() - t_start) if done.size else 0.0
        for arr in (recs.sent, recs.first, recs.last):  # times relative to the phase start
            arr -= t_start
        recs.token_times = [None if t is None else [x - t_start for x in t] for t in recs.token_times]
        server_delta = metrics_delta = None
        if stats:
            after = await asyncio.to_thread(settle, lambda: read_stats(server.http_url, model), st0, _served(protocol, recs))
            server_delta = after - st0
        if metrics and me0 is not None:
            _, me1 = await snapshot(server, model, False, True)
            metrics_delta = (me1 - me0).model_summary(model)
    finally:
        await transport.close()
    unit = "stream" if protocol == "grpc-stream" else ("sequence" if transport.saw_sequences else "request")
    return LoadReport(model=model, mode=mode, protocol=protocol, records=recs, wall_s=wall, unit=unit,
                      client_cpu_s=cpu, concurrency=concurrency, offered_rate=offered_rate,
                      server=server_delta, metrics=metrics_delta, label=label)
