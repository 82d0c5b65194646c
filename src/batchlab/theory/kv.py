"""KV-cache arithmetic: 2 (K and V) · layers · kv_heads · head_dim · bytes per element per token, the
reference model shapes (`MODEL_SHAPES`), and how many sequences fit in one GPU's budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from batchlab._validate import count

GIB = 1024**3

#: HBM of common accelerators, in decimal GB as vendors state them (NVIDIA data sheets).
GPU_MEMORY_GB = {"A100-40GB": 40.0, "A100-80GB": 80.0, "H100-SXM": 80.0, "H200": 141.0, "L40S": 48.0}

_DTYPE_OF_BYTES = {1: "fp8", 2: "fp16", 4: "float32"}


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_element: int = 2) -> int:
    """KV cache bytes per token = 2 (K and V) · layers · kv_heads · head_dim · bytes per element."""
    for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads),
                        ("head_dim", head_dim), ("bytes_per_element", bytes_per_element)):
        count(name, value, message=f"{name} must be a positive int, got {value!r}")
    return 2 * int(n_layers) * int(n_kv_heads) * int(head_dim) * int(bytes_per_element)


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only model's KV shape; `params_b` (billions of parameters) and `context_len` are
    None where they do not apply (the toy LM)."""

    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    bytes_per_element: int = 2
    params_b: float | None = None
    context_len: int | None = None

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token occupies."""
        return kv_bytes_per_token(self.n_layers, self.n_kv_heads, self.head_dim, self.bytes_per_element)

    @property
    def label(self) -> str:
        """The name with the cache dtype, and GQA when KV heads are shared: "Llama-3-8B (fp16, GQA)"."""
        dtype = _DTYPE_OF_BYTES.get(self.bytes_per_element, f"{self.bytes_per_element} B")
        return f"{self.name} ({dtype}{', GQA' if self.n_kv_heads < self.n_heads else ''})"


#: Reference models with fp16/bf16 caches (model cards: Llama-2-7B 6.74 B parameters, 32 layers ×
#: 32 KV heads × 128 = 0.5 MiB per token; Llama-3-8B 8.03 B, GQA with 8 KV heads = 128 KiB per token).
MODEL_SHAPES = {
    "Llama-2-7B": ModelShape("Llama-2-7B", 32, 32, 32, 128, 2, params_b=6.74, context_len=4096),
    "Llama-3-8B": ModelShape("Llama-3-8B", 32, 32, 8, 128, 2, params_b=8.03, context_len=8192),
}


def _shape(model: str) -> ModelShape:
    if model not in MODEL_SHAPES:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODEL_SHAPES)}")
    return MODEL_SHAPES[model]


def kv_bytes_for(model: str) -> int:
    """KV bytes per token of a model in `MODEL_SHAPES` (fp16/bf16 cache)."""
    return _shape(model).bytes_per_token


def max_concurrent_sequences(free_bytes: float, bytes_per_token: float, tokens_per_sequence: float) -> int:
    """How many sequences of `tokens_per_sequence` fit in `free_bytes` of KV cache."""
    if bytes_per_token <= 0 or tokens_per_sequence <= 0:
        raise ValueError("bytes_per_token and tokens_per_sequence must be positive")
    return int(free_bytes // (bytes_per_token * tokens_per_sequence))


@dataclass(frozen=True)
class KVPlan:
    """The result of `plan_kv` (bytes unless named otherwise)."""

    gpu_bytes: float
    weight_bytes: float
    reserve_bytes: float
    fraction: float
    kv_budget_bytes: float
    bytes_per_token: int
    tokens_per_sequence: int
    kv_token_budget: int
    max_sequences: int
    bytes_per_sequence: int


def plan_kv(gpu_bytes: float, weight_bytes: float, bytes_per_token: int, tokens_per_sequence: int,
            fraction: float = 0.9, reserve_bytes: float = 0.0) -> KVPlan:
    """How many sequences of `tokens_per_sequence` fit in the KV cache of one GPU: the budget is
    `fraction` (TensorRT-LLM's default 0.9) of (GPU − weights − `reserve_bytes`); ValueError when
    nothing is left."""
    if gpu_bytes <= 0 or weight_bytes < 0 or reserve_bytes < 0:
        raise ValueError("gpu_bytes must be positive, weight_bytes and reserve_bytes non-negative")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if bytes_per_token <= 0 or tokens_per_sequence <= 0:
        raise ValueError("bytes_per_token and tokens_per_sequence must be positive")
    free = gpu_bytes - weight_bytes - reserve_bytes
    if free <= 0:
        raise ValueError(f"the weights ({weight_bytes / 1e9:.1f} GB) and reserve leave no memory on a "
                         f"{gpu_bytes / 1e9:.1f} GB GPU")
    budget = free * fraction
    return KVPlan(
        gpu_bytes=float(gpu_bytes), weight_bytes=float(weight_bytes), reserve_bytes=float(reserve_bytes),
        fraction=float(fraction), kv_budget_bytes=float(budget), bytes_per_token=int(bytes_per_token),
        tokens_per_sequence=int(tokens_per_sequence), kv_token_budget=int(budget // bytes_per_token),
        max_sequences=max_concurrent_sequences(budget, bytes_per_token, tokens_per_sequence),
        bytes_per_sequence=int(bytes_per_token * tokens_per_sequence),
    )


def kv_plan_table(models: Iterable[str], gpu: str, seq_lens: Sequence[int], fraction: float = 0.9) -> list[dict[str, Any]]:
    """Rows (model, gpu, seq_len, kv_bytes_per_token, kv_gib_per_seq, budget_gib, max_sequences) for
    each of `models` on `gpu` at each of `seq_lens`; fp16 weights (2 bytes per parameter)."""
    if gpu not in GPU_MEMORY_GB:
        raise ValueError(f"unknown gpu {gpu!r}; known: {', '.join(GPU_MEMORY_GB)}")
    rows = []
    for m in models:
        shape = _shape(m)
        bpt = shape.bytes_per_token
        w = shape.params_b * 1e9 * 2
        for L in seq_lens:
            p = plan_kv(GPU_MEMORY_GB[gpu] * 1e9, w, bpt, int(L), fraction)
            rows.append({"model": m, "gpu": gpu, "seq_len": int(L), "kv_bytes_per_token": bpt,
                         "kv_gib_per_seq": p.bytes_per_sequence / GIB, "budget_gib": p.kv_budget_bytes / GIB,
                         "max_sequences": p.max_sequences})
    return rows
