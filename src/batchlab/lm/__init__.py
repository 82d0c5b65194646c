"""batchlab.lm: a numpy toy decoder-only LM with a KV cache, and what serves it.

A 4-layer, d_model 256, 4-head transformer over the characters of the source article, with
deterministic integer weights from a seed and a bigram prior counted from the article. It is
batch invariant: a sequence gets bit-identical logits alone or inside any batch.

    from batchlab.lm import ToyLM, encode, decode, generate
    lm = ToyLM.default()
    decode(generate(lm, encode("动态批处理"), max_tokens=20))

Modules: `vocab` (the article, tokenizer, prior), `config`, `model` (ToyLM),
`kvcache` (KVCache and `kv_report`), `sampling`, `generation` (Sequence, step, static batches),
`scheduler` (continuous batching + admission policy), `perf` (t(B) and its fit), `blas`.
The Python-backend models that serve it are in `batchlab.models`.
"""

from batchlab.lm.config import LMConfig
from batchlab.lm.generation import (Sequence, StaticBatchResult, check_prompt, generate,
                                    generate_static_batch, step)
from batchlab.lm.kvcache import KVCache, kv_report
from batchlab.lm.model import ToyLM
from batchlab.lm.perf import decode_step_times, fit_linear
from batchlab.lm.sampling import greedy, make_rng, sample
from batchlab.lm.scheduler import (AdmissionPolicy, ContinuousBatcher, FCFSAdmission, SeqInfo,
                                   StepReport)
from batchlab.lm.vocab import (BOS_ID, EOS_ID, PAD_ID, UNK_ID, VOCAB_SIZE, decode, encode)

__all__ = [
    "LMConfig", "ToyLM", "KVCache", "kv_report", "Sequence", "StaticBatchResult", "check_prompt",
    "generate", "generate_static_batch", "step", "greedy", "sample", "make_rng", "AdmissionPolicy",
    "ContinuousBatcher", "FCFSAdmission", "SeqInfo", "StepReport", "decode_step_times",
    "fit_linear", "encode", "decode", "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "VOCAB_SIZE",
]
