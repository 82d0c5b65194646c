"""batchlab.batching: the three batching mechanisms the course teaches, each written once, for a
learner to read, and run by every driver (the simulators, the course models, the labs).

* `slots` — Triton's sequence batcher: which batch slot a sequence owns (`SequenceSlots`) and the
  control inputs of each slot (`SlotControl`).

Nothing here imports protobuf, tritonclient, the simulators or the LM: the mechanisms only decide;
`batchlab.sim` and `batchlab.lm` drive them.
"""

from .slots import SequenceRequest, SequenceSlots, SlotControl

__all__ = ["SequenceRequest", "SequenceSlots", "SlotControl"]
