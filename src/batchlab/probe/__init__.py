"""batchlab.probe: measurements the chapters make on the real server with crafted requests.

* `batch_time` — t_batch(B): one execution of B rows at a time, timed by Triton's batch_stats;
* `batcher` — Triton's batch-forming rule observed with crafted arrival patterns (reload a model
  with new batcher settings, send the pattern, read the batch sizes), and the same patterns in
  the simulator;
* `latency` — T_total split into queue, prefill, decode and overhead for the `generate` model.

Load runs themselves go through `batchlab.load`; this package only decides what to send and how
to read the server's answer.
"""

from batchlab.probe.batch_time import BatchTimes, measure_batch_times
from batchlab.probe.batcher import (BatcherSettings, Pattern, PatternOutcome, ProbeError, allows_reload,
                                    batcher_config, batches_from_sizes, burst, chapter_patterns, reloadable,
                                    run_pattern, run_patterns, simulate_pattern, spaced)
from batchlab.probe.latency import (PARTS, GenerateCalibration, calibrate_generate, generate_inputs,
                                    split_report, split_simulated)

__all__ = [
    "BatchTimes", "measure_batch_times", "BatcherSettings", "Pattern", "PatternOutcome", "ProbeError",
    "allows_reload", "batcher_config", "batches_from_sizes", "burst", "chapter_patterns", "reloadable",
    "run_pattern", "run_patterns", "simulate_pattern", "spaced", "PARTS", "GenerateCalibration", "calibrate_generate",
    "generate_inputs", "split_report", "split_simulated",
]
