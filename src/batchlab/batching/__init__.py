"""batchlab.batching: the three batching mechanisms the course teaches, each written once, for a
learner to read, and run by every driver (the simulators, the course models, the labs).

* `dynamic` — Triton's dynamic batcher: the batch decision `next_batch` (``GetDynamicBatch``), its
  settings (`BatchRule`), and the state it works in: `DynamicBatcher` (the queue, the `Payload` that
  keeps growing while the instances are busy, the wake-up rule) and `RateLimiter` (the payloads
  waiting for an instance, at most 2 per instance, merged when an instance takes one).
* `slots` — Triton's sequence batcher: which batch slot a sequence owns (`SequenceSlots`) and the
  control inputs of each slot (`SlotControl`).
* `scheduler` — continuous batching's step (`Scheduler`, vLLM V1 / nano-vllm style), with its
  `request`s, its `policies` (admission: reserve / on demand; the step's shape) and the KV
  `blocks` it allocates (`BlockManager`: a paged pool, reference counts, prefix caching).
* `speculative` — speculative decoding's greedy acceptance rule (`accept`): which of a step's draft
  tokens the target keeps (the LM's executor applies it; the scheduler rolls back the rest).

Nothing here imports protobuf, tritonclient, the simulators or the LM: the mechanisms only decide;
`batchlab.sim` and `batchlab.lm` drive them.
"""

from .blocks import BLOCK_SIZE, BlockManager, BlockTable, block_key
from .dynamic import BatchRule, Decision, DynamicBatcher, Payload, QueuedRequest, RateLimiter, next_batch
from .policies import (ADMISSION, STEP_POLICIES, OnDemandAdmission, ReserveAdmission, prefill_chunks,
                       whole_prompts)
from .request import GenerationRequest, StepPlan
from .scheduler import Scheduler
from .slots import SequenceRequest, SequenceSlots, SlotControl
from .speculative import accept

__all__ = ["BatchRule", "Decision", "DynamicBatcher", "Payload", "QueuedRequest", "RateLimiter", "next_batch",
           "SequenceRequest", "SequenceSlots", "SlotControl", "BLOCK_SIZE", "BlockManager", "BlockTable",
           "block_key", "ADMISSION", "STEP_POLICIES", "OnDemandAdmission", "ReserveAdmission",
           "prefill_chunks", "whole_prompts", "GenerationRequest", "StepPlan", "Scheduler", "accept"]
