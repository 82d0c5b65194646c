"""batchlab.batching: the three batching mechanisms the course teaches, each written once, for a
learner to read, and run by every driver (the simulators, the course models, the labs).

* `dynamic` — Triton's dynamic batcher: the batch decision `next_batch` (``GetDynamicBatch``), its
  settings (`BatchRule`), and the state it works in: `DynamicBatcher` (the queue, the `Payload` that
  keeps growing while the instances are busy, the wake-up rule) and `RateLimiter` (the payloads
  waiting for an instance, at most 2 per instance, merged when an instance takes one).
* `slots` — Triton's sequence batcher: which batch slot a sequence owns (`SequenceSlots`) and the
  control inputs of each slot (`SlotControl`).

Nothing here imports protobuf, tritonclient, the simulators or the LM: the mechanisms only decide;
`batchlab.sim` and `batchlab.lm` drive them.
"""

from .dynamic import BatchRule, Decision, DynamicBatcher, Payload, QueuedRequest, RateLimiter, next_batch
from .slots import SequenceRequest, SequenceSlots, SlotControl

__all__ = ["BatchRule", "Decision", "DynamicBatcher", "Payload", "QueuedRequest", "RateLimiter", "next_batch",
           "SequenceRequest", "SequenceSlots", "SlotControl"]
