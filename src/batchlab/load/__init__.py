"""Load generation on tritonclient, and the server's own view of a run.

* `workload` — what to send (`RequestSpec`, `SequenceSpec`) and when (arrival schedules);
* `transport`, `streams` — unary gRPC / HTTP and gRPC-stream requests, one `RequestRecord` each;
* `closed_loop`, `open_loop`, `runner` — the two load shapes and what every run shares;
* `records`, `report` — the records of a run and its `LoadReport` (client and server views);
* `stats` — the statistics extension (`ModelStats`, `settle`); `metrics` — the Prometheus endpoint.
"""

from batchlab.load.closed_loop import closed_loop, run_closed_loop
from batchlab.load.metrics import MetricsSnapshot, MetricsTimeline, scrape, timeline_rows
from batchlab.load.open_loop import open_loop, run_open_loop
from batchlab.load.records import Records, RequestRecord, is_rejection
from batchlab.load.report import ClientFellBehind, LoadReport, pool_reports
from batchlab.load.runner import Endpoints, fetch_stats
from batchlab.load.stats import ModelStats, read_stats, settle
from batchlab.load.workload import RequestSpec, SequenceSpec, poisson_arrivals

__all__ = [
    "RequestSpec", "SequenceSpec", "poisson_arrivals",
    "closed_loop", "run_closed_loop", "open_loop", "run_open_loop",
    "RequestRecord", "Records", "is_rejection", "LoadReport", "pool_reports", "ClientFellBehind",
    "ModelStats", "read_stats", "settle", "fetch_stats", "MetricsSnapshot", "scrape", "MetricsTimeline", "timeline_rows",
    "Endpoints",
]
