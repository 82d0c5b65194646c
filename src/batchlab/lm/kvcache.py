"""Per-sequence KV cache of the toy LM (the bytes-per-token formula is `batchlab.theory.kv`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchlab.theory.kv import MODEL_SHAPES, ModelShape, kv_bytes_per_token

#: Cache growth granularity in tokens (a "block"; capacity is always a multiple of it).
BLOCK_TOKENS = 16


def kv_report(config: Any) -> list[dict]:
    """Bytes per token of an `LMConfig` (float32 KV) next to Llama-2-7B and Llama-3-8B: rows of
    name, n_layers, n_kv_heads, head_dim, bytes_per_element, bytes_per_token."""
    ours = ModelShape("batchlab toy LM", config.n_layers, config.n_heads, config.n_kv_heads,
                      config.head_dim, 4)
    rows = [("batchlab toy LM (float32)", ours)] + [(s.label, s) for s in MODEL_SHAPES.values()]
    return [
        {"name": name, "n_layers": s.n_layers, "n_kv_heads": s.n_kv_heads,
         "head_dim": s.head_dim, "bytes_per_element": s.bytes_per_element,
         "bytes_per_token": s.bytes_per_token}
        for name, s in rows
    ]


class KVCache:
    """Keys and values of one sequence, float32 (layers, kv_heads, capacity, head_dim); capacity grows
    by doubling, in blocks of `BLOCK_TOKENS`."""

    __slots__ = ("k", "v", "length", "max_len", "_shape")

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int,
                 capacity: int = BLOCK_TOKENS) -> None:
        self._shape = (n_layers, n_kv_heads, head_dim)
        self.max_len = int(max_len)
        self.length = 0
        cap = _round_up(max(1, min(capacity, self.max_len)))
        self.k = np.zeros((n_layers, n_kv_heads, cap, head_dim), dtype=np.float32)
        self.v = np.zeros_like(self.k)

    @property
    def capacity(self) -> int:
        """Tokens the arrays can hold without growing."""
        return self.k.shape[2]

    @property
    def bytes_per_token(self) -> int:
        """K and V bytes of one token (all layers)."""
        n_layers, n_kv_heads, head_dim = self._shape
        return kv_bytes_per_token(n_layers, n_kv_heads, head_dim, 4)

    @property
    def used_bytes(self) -> int:
        """Bytes of the `length` valid tokens."""
        return self.length * self.bytes_per_token

    @property
    def allocated_bytes(self) -> int:
        """Bytes actually allocated (capacity)."""
        return self.k.nbytes + self.v.nbytes

    def reserve(self, total: int) -> None:
        """Make room for `total` tokens (growing by doubling); ValueError past `max_len`."""
        if total > self.max_len:
            raise ValueError(f"sequence of {total} tokens exceeds max_seq_len {self.max_len}")
        if total <= self.capacity:
            return
        cap = min(_round_up(max(total, 2 * self.capacity)), _round_up(self.max_len))
        grow = ((0, 0), (0, 0), (0, cap - self.capacity), (0, 0))
        self.k, self.v = np.pad(self.k, grow), np.pad(self.v, grow)

    def truncate(self, length: int) -> None:
        """Forget tokens past `length` (they are overwritten by the next step)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} tokens to {length}")
        self.length = length


def _round_up(n: int) -> int:
    return -(-n // BLOCK_TOKENS) * BLOCK_TOKENS
