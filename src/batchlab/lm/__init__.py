"""batchlab.lm: a numpy toy decoder-only LM with a KV cache (a paged pool, or a contiguous array per
sequence), batch invariant (a sequence gets bit-identical logits alone or in any batch), and the
continuous-batching engine that serves it (`ContinuousBatcher`, stepping `batchlab.batching.Scheduler`).
"""

from batchlab.lm.batcher import ContinuousBatcher, StepReport
from batchlab.lm.config import LMConfig
from batchlab.lm.generation import (Sequence, StaticBatchResult, check_prompt, generate,
                                    generate_static_batch, step, step_chunks)
from batchlab.lm.kvcache import KVCache, KVPool, PagedKV, kv_report
from batchlab.lm.model import ToyLM
from batchlab.lm.perf import decode_step_times
from batchlab.lm.sampling import greedy, make_rng, sample
from batchlab.lm.vocab import (BOS_ID, EOS_ID, PAD_ID, UNK_ID, VOCAB_SIZE, decode, encode)

__all__ = [
    "LMConfig", "ToyLM", "KVCache", "KVPool", "PagedKV", "kv_report", "Sequence", "StaticBatchResult",
    "check_prompt", "generate", "generate_static_batch", "step", "step_chunks", "greedy", "sample",
    "make_rng", "ContinuousBatcher", "StepReport", "decode_step_times",
    "encode", "decode", "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "VOCAB_SIZE",
]
