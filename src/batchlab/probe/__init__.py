"""batchlab.probe: measurements on the real server with crafted requests (traffic through `batchlab.load`):
t(B) (`batch_time`), the batch-forming rule (`batcher`), T_total's parts (`latency`), the decode roofline (`roofline`).
"""

from batchlab.probe.batch_time import (BatchTimes, Calibration, calibrate_service, isotonic, load_factor,
                                       measure_batch_times, service_from_stats)
from batchlab.probe.batcher import (Pattern, ProbeError, batch_mismatch, batcher_config, batches_from_sizes, burst,
                                    chapter_patterns, client_arrivals, reloadable, run_patterns, simulate_pattern, spaced)
from batchlab.probe.latency import GenerateCalibration, calibrate_generate, split_report, split_simulated

__all__ = [
    "BatchTimes", "measure_batch_times", "Calibration", "calibrate_service", "service_from_stats", "load_factor",
    "isotonic", "Pattern", "ProbeError", "batch_mismatch", "batcher_config", "client_arrivals", "batches_from_sizes",
    "burst", "chapter_patterns", "reloadable", "run_patterns", "simulate_pattern", "spaced",
    "GenerateCalibration", "calibrate_generate", "split_report", "split_simulated",
]
