"""batchlab.probe: measurements the chapters make on the real server with crafted requests.

* `batch_time` — t_batch(B): one execution of B rows at a time, timed by Triton's batch_stats,
  the simulator service table made from it (`calibrate_service`), and t(B) read from any run's
  statistics (`batch_table`, `service_from_stats`, `load_factor`, `service_model`);
* `batcher` — Triton's batch-forming rule observed with crafted arrival patterns (reload a model
  with new batcher settings, send the pattern, read the batch sizes), and the same patterns in
  the simulator;
* `latency` — T_total split into queue, prefill, decode and overhead for the `generate` model.

Load runs themselves go through `batchlab.load`; this package only decides what to send and how
to read the server's answer.
"""

from batchlab.probe.batch_time import (BatchTimes, Calibration, batch_table, calibrate_service, isotonic,
                                       load_factor, measure_batch_times, service_from_stats, service_model,
                                       speedup_ceiling)
from batchlab.probe.batcher import (Pattern, PatternOutcome, ProbeError, allows_reload, batcher_config,
                                    batches_from_sizes, burst, chapter_patterns, reloadable, run_pattern, run_patterns,
                                    simulate_pattern, spaced)
from batchlab.probe.latency import PARTS, GenerateCalibration, calibrate_generate, split_report, split_simulated

__all__ = [
    "BatchTimes", "measure_batch_times", "Calibration", "calibrate_service", "batch_table", "service_from_stats",
    "load_factor", "isotonic", "service_model", "speedup_ceiling",
    "Pattern", "PatternOutcome", "ProbeError", "allows_reload", "batcher_config", "batches_from_sizes", "burst",
    "chapter_patterns", "reloadable", "run_pattern", "run_patterns", "simulate_pattern", "spaced",
    "PARTS", "GenerateCalibration", "calibrate_generate", "split_report", "split_simulated",
]
