"""Hyper-parameters of the toy decoder-only LM."""

from __future__ import annotations

from dataclasses import dataclass

from batchlab._validate import count
from batchlab.lm.vocab import VOCAB_SIZE

#: float32 represents every integer below 2**24 exactly: the bound for exact integer matmuls.
EXACT_FLOAT32_INT = 2**24


@dataclass(frozen=True)
class LMConfig:
    """Shape and seed of a `ToyLM`: weights in ±weight_levels and activations in ±act_levels keep
    every partial sum an integer below 2**24, exact in float32 (batch invariance)."""

    vocab_size: int = VOCAB_SIZE
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 4
    d_ff: int = 1024
    max_seq_len: int = 512
    seed: int = 0
    weight_levels: int = 31
    act_levels: int = 127
    context_weight: float = 0.5
    prior_weight: float = 1.0
    #: add-k smoothing of the bigram counts behind the prior
    prior_smoothing: float = 0.01
    #: run a single row through the same matrix-matrix (GEMM) kernel as a batch, as a GPU
    #: serving engine does; False lets numpy use its matrix-vector (GEMV) path for one row.
    always_gemm: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff",
                     "max_seq_len", "weight_levels", "act_levels"):
            value = getattr(self, name)
            count(name, value, message=f"LMConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.vocab_size != VOCAB_SIZE:
            raise ValueError(f"vocab_size must be {VOCAB_SIZE} (the article's characters)")
        widest = max(self.d_model, self.d_ff)
        if widest * self.act_levels * self.weight_levels >= EXACT_FLOAT32_INT:
            raise ValueError(
                f"matmuls of width {widest} with levels {self.act_levels}x{self.weight_levels} "
                f"could exceed 2**24: float32 sums would no longer be exact")
        # Q·Kᵀ: head_dim · 127 · 127; P·V: (2**16 + max_seq_len / 2) · 127 (see model.py)
        if (self.head_dim * 127 * 127 >= EXACT_FLOAT32_INT
                or (2**16 + self.max_seq_len) * 127 >= EXACT_FLOAT32_INT):
            raise ValueError("head_dim or max_seq_len too large for exact attention sums")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads
