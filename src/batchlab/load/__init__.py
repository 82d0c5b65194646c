"""Load generation on tritonclient, and the server's own view of a run.

Closed loop (fixed concurrency) and open loop (arrivals fixed in advance) over gRPC (asyncio),
HTTP (asyncio) or gRPC streams (decoupled models); a record per request; the statistics extension
and the Prometheus endpoint read before and after; and a `LoadReport` that puts them together::

    from batchlab.load import RequestSpec, run_closed_loop
    spec = RequestSpec({"X": np.ones((1, 4), np.float32)})
    report = run_closed_loop(server, "echo", spec, concurrency=8, n_requests=2000)
    report.summary()
"""

from batchlab.load.closed_loop import closed_loop, run_closed_loop
from batchlab.load.metrics import MetricsSnapshot, MetricsTimeline, scrape, timeline_rows
from batchlab.load.open_loop import open_loop, run_open_loop
from batchlab.load.records import Records, RequestRecord, is_rejection
from batchlab.load.report import ClientFellBehind, LoadReport, pool_reports
from batchlab.load.runner import Endpoints, fetch_stats
from batchlab.load.stats import ModelStats, read_stats
from batchlab.load.workload import (
    RequestSpec,
    SequenceSpec,
    Stage,
    poisson_arrivals,
    staged_poisson,
    uniform_arrivals,
)

__all__ = [
    "RequestSpec", "SequenceSpec", "poisson_arrivals", "uniform_arrivals", "staged_poisson", "Stage",
    "closed_loop", "run_closed_loop", "open_loop", "run_open_loop",
    "RequestRecord", "Records", "is_rejection", "LoadReport", "pool_reports", "ClientFellBehind",
    "ModelStats", "read_stats", "fetch_stats", "MetricsSnapshot", "scrape", "MetricsTimeline", "timeline_rows",
    "Endpoints",
]
