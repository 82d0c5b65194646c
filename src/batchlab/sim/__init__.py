"""batchlab.sim: an event-driven simulator of Triton's batchers and of continuous batching.

* `workload` / `lengths` — arrival times and token lengths;
* `service` — execution-time models: `Affine`, `Table` (one batch), `TokenCost` (one forward pass);
* `dynamic` drives Triton's dynamic batcher (`batchlab.batching.dynamic`; its decision `next_batch` and
  settings `BatchRule` re-exported here) behind the queue policy (`QueuePolicy`, ``ModelQueuePolicy``);
* `batchlab.batching.slots` (re-exported here) — the sequence batcher's slot assignment (`SequenceSlots`) and control inputs (`SlotControl`);
* schedulers: `dynamic` (no batching: ``max_batch_size=1``), `static_generation`,
  `sequence`, `continuous`;
* `results` / `summary` — the records and their summary.

Nothing here plots. Command line: ``python -m batchlab.sim dynamic --rate R --max-batch-size B ...``.
"""

from .continuous import simulate_continuous
from .dynamic import QueuePolicy, simulate_dynamic, simulate_rule
from .results import BATCH_DTYPE, RECORD_DTYPE, SimResult
from batchlab.batching.dynamic import BatchRule, Decision, QueuedRequest, next_batch
from .sequence import simulate_sequence
from batchlab.batching.slots import SequenceSlots, SlotControl
from .service import Affine, Table, TokenCost
from .static_generation import simulate_static_generation

__all__ = [
    "simulate_dynamic", "simulate_rule", "simulate_static_generation", "simulate_sequence",
    "simulate_continuous", "SimResult", "RECORD_DTYPE", "BATCH_DTYPE", "Affine", "Table", "TokenCost",
    "BatchRule", "QueuePolicy", "next_batch", "Decision", "QueuedRequest", "SequenceSlots", "SlotControl",
]
