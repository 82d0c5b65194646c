"""Load generation on tritonclient (closed and open loop over gRPC, HTTP or a gRPC stream), and the
server's own view of a run (statistics extension, Prometheus metrics).
"""

from batchlab.load.closed_loop import run_closed_loop
from batchlab.load.metrics import MetricsSnapshot, MetricsTimeline, scrape, timeline_rows
from batchlab.load.open_loop import run_open_loop
from batchlab.load.records import Records, RequestRecord, is_rejection
from batchlab.load.report import ClientFellBehind, LoadReport, pool_reports
from batchlab.load.stats import ModelStats, read_stats, settle
from batchlab.load.workload import RequestSpec, SequenceSpec, poisson_arrivals

__all__ = [
    "RequestSpec", "SequenceSpec", "poisson_arrivals",
    "run_closed_loop", "run_open_loop",
    "RequestRecord", "Records", "is_rejection", "LoadReport", "pool_reports", "ClientFellBehind",
    "ModelStats", "read_stats", "settle", "MetricsSnapshot", "scrape", "MetricsTimeline", "timeline_rows",
]
