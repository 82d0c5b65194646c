"""The toy LM's KV storage, two layouts behind one interface (the bytes-per-token formula is
`batchlab.theory.kv`):

* `KVPool` + `PagedKV` — PagedAttention (vLLM): one pool of fixed-size blocks per model instance;
  a sequence's `PagedKV` writes and reads its keys and values through its block table (which
  `batching.blocks.BlockManager` fills), so it holds whole blocks only as it grows into them and
  sequences sharing a prefix read the same blocks. What `lm_stream` runs.
* `KVCache` — a contiguous array per sequence that doubles when full (what PagedAttention replaced):
  the request-level models (`generate`, `lm_iterative`, `lm_step`) keep it, and chapter 03 measures
  how much of it holds tokens.

`ToyLM.forward` needs of a cache: `length`, `reserve(total)`, `write(layer, at, k, v)` and
`read(layer, n)` (keys and values of the first n positions, (kv_heads, n, head_dim)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchlab.batching.blocks import BLOCK_SIZE, BlockTable
from batchlab.theory.kv import MODEL_SHAPES, ModelShape, kv_bytes_per_token

#: Growth granularity of the contiguous cache in tokens (its capacity is always a multiple of it).
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
    """Keys and values of one sequence in one contiguous float32 array (layers, kv_heads, capacity,
    head_dim); capacity grows by doubling, in multiples of `BLOCK_TOKENS`."""

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

    def write(self, layer: int, at: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store keys and values (n, kv_heads, head_dim) of positions at … at + n - 1 of `layer`."""
        n = k.shape[0]
        self.k[layer, :, at:at + n] = k.transpose(1, 0, 2)
        self.v[layer, :, at:at + n] = v.transpose(1, 0, 2)

    def read(self, layer: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values (kv_heads, n, head_dim) of the first `n` positions of `layer` (views)."""
        return self.k[layer, :, :n], self.v[layer, :, :n]

    def truncate(self, length: int) -> None:
        """Forget tokens past `length` (they are overwritten by the next step)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} tokens to {length}")
        self.length = length


def _round_up(n: int) -> int:
    return -(-n // BLOCK_TOKENS) * BLOCK_TOKENS


class KVPool:
    """The KV memory of one model instance: `num_blocks` blocks of `block_size` token slots, keys and
    values float32 (layers, kv_heads, num_blocks, block_size, head_dim). The storage itself;
    which sequence owns which block is the block manager's business."""

    def __init__(self, config: Any, num_blocks: int, block_size: int = BLOCK_SIZE) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"a KV pool needs >= 1 block of >= 1 token, got {num_blocks} x {block_size}")
        self.block_size = int(block_size)
        self.num_blocks = int(num_blocks)
        self.max_len = config.max_seq_len
        shape = (config.n_layers, config.n_kv_heads, self.num_blocks, self.block_size, config.head_dim)
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros_like(self.k)


class PagedKV:
    """One sequence's view of a `KVPool` through its `BlockTable`: position p lives in block
    ``table.blocks[p // block_size]`` at slot ``p % block_size``. `length` positions hold KV."""

    __slots__ = ("pool", "table", "length")

    def __init__(self, pool: KVPool, table: BlockTable, length: int = 0) -> None:
        self.pool, self.table, self.length = pool, table, int(length)

    @property
    def capacity(self) -> int:
        """Token slots of the blocks its table holds."""
        return len(self.table.blocks) * self.pool.block_size

    def reserve(self, total: int) -> None:
        """ValueError unless its blocks hold `total` tokens (the block manager allocates, not the LM)."""
        if total > self.pool.max_len:
            raise ValueError(f"sequence of {total} tokens exceeds max_seq_len {self.pool.max_len}")
        if total > self.capacity:
            raise ValueError(f"block table holds {self.capacity} token slots, the step needs {total}: "
                             "allocate its blocks before the step")

    def write(self, layer: int, at: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store keys and values (n, kv_heads, head_dim) of positions at … at + n - 1, block by block."""
        size = self.pool.block_size
        if k.shape[0] == 1:  # decode: one slot
            block, slot = self.table.blocks[at // size], at % size
            self.pool.k[layer, :, block, slot] = k[0]
            self.pool.v[layer, :, block, slot] = v[0]
            return
        pos = np.arange(at, at + k.shape[0])
        blocks = np.asarray(self.table.blocks)[pos // size]
        self.pool.k[layer, :, blocks, pos % size] = k
        self.pool.v[layer, :, blocks, pos % size] = v

    def read(self, layer: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values (kv_heads, n, head_dim) of the first `n` positions, gathered from its blocks
        in table order (a real PagedAttention kernel reads them in place)."""
        pool = self.pool
        blocks = self.table.blocks[:-(-n // pool.block_size)]
        heads, dim = pool.k.shape[1], pool.k.shape[4]
        k = pool.k[layer][:, blocks].reshape(heads, -1, dim)[:, :n]
        v = pool.v[layer][:, blocks].reshape(heads, -1, dim)[:, :n]
        return k, v

    def truncate(self, length: int) -> None:
        """Forget positions past `length` (free their blocks with the block manager's `truncate`)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} tokens to {length}")
        self.length = length
