"""batchlab.lm: a numpy toy decoder-only LM with a KV cache, batch invariant (a sequence gets
bit-identical logits alone or in any batch), and the continuous-batching scheduler that serves it.
"""

from batchlab.lm.config import LMConfig
from batchlab.lm.generation import (Sequence, StaticBatchResult, check_prompt, generate,
                                    generate_static_batch, step, step_chunks)
from batchlab.lm.kvcache import KVCache, kv_report
from batchlab.lm.model import ToyLM
from batchlab.lm.perf import decode_step_times
from batchlab.lm.prefix_cache import PrefixCache, block_keys
from batchlab.lm.sampling import greedy, make_rng, sample
from batchlab.lm.scheduler import (AdmissionPolicy, ContinuousBatcher, ContinuousScheduler,
                                   FCFSAdmission, GenerationRequest, StepPlan, StepReport)
from batchlab.lm.vocab import (BOS_ID, EOS_ID, PAD_ID, UNK_ID, VOCAB_SIZE, decode, encode)

__all__ = [
    "LMConfig", "ToyLM", "KVCache", "kv_report", "Sequence", "StaticBatchResult", "check_prompt",
    "generate", "generate_static_batch", "step", "step_chunks", "greedy", "sample", "make_rng", "AdmissionPolicy",
    "ContinuousBatcher", "ContinuousScheduler", "FCFSAdmission", "GenerationRequest",
    "StepPlan", "StepReport", "decode_step_times", "PrefixCache", "block_keys",
    "encode", "decode", "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "VOCAB_SIZE",
]
