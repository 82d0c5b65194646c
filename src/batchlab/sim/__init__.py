"""batchlab.sim: an event-driven simulator of Triton's batchers and of continuous batching.

* `workload` / `lengths` — arrival times and token lengths;
* `service` — execution-time models: `Affine`, `Table` (one batch), `TokenCost` (one forward pass);
* `rule` — the queue policy (`QueuePolicy`), and re-exported from `batchlab.batching.dynamic` the
  dynamic batcher's decision (`next_batch`) and settings (`BatchRule`); `dynamic` drives the batcher;
* `batchlab.batching.slots` (re-exported here) — the sequence batcher's slot assignment (`SequenceSlots`) and control inputs (`SlotControl`);
* `engine` — the event heap; schedulers: `dynamic` (no batching: ``max_batch_size=1``), `static_generation`,
  `sequence`, `continuous`;
* `results` / `summary` — the records and their summary.

Nothing here plots. Command line: ``python -m batchlab.sim dynamic --rate R --max-batch-size B ...``.
"""

from .continuous import simulate_continuous
from .dynamic import simulate_dynamic, simulate_rule
from .results import BATCH_DTYPE, RECORD_DTYPE, SimResult
from .rule import BatchRule, Decision, QueuePolicy, QueuedRequest, next_batch
from .sequence import simulate_sequence
from batchlab.batching.slots import SequenceSlots, SlotControl
from .service import Affine, Table, TokenCost
from .static_generation import simulate_static_generation

__all__ = [
    "simulate_dynamic", "simulate_rule", "simulate_static_generation", "simulate_sequence",
    "simulate_continuous", "SimResult", "RECORD_DTYPE", "BATCH_DTYPE", "Affine", "Table", "TokenCost",
    "BatchRule", "QueuePolicy", "next_batch", "Decision", "QueuedRequest", "SequenceSlots", "SlotControl",
]
