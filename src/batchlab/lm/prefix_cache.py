"""Block-granular prefix caching (vLLM's automatic prefix caching): the KV of full blocks of
`block_size` prompt tokens, each keyed by a hash of the whole prefix up to its end, so a new request
whose prompt starts the same way reuses the longest cached run of blocks and prefills only the rest.
`ContinuousScheduler` looks requests up and fills the cache; the real path stores the KV arrays,
the simulator stores nothing (it only prices the tokens not prefilled)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Callable, Hashable, Sequence

import numpy as np

from batchlab._validate import count

#: Tokens per cached block (vLLM's default block size).
BLOCK_SIZE = 16


def block_keys(tokens: np.ndarray | Sequence[int], block_size: int = BLOCK_SIZE) -> tuple[bytes, ...]:
    """One key per full block of `tokens`: block j's key hashes block j-1's key and block j's tokens,
    so it names the whole prefix (two prompts share a key only if they agree up to that block)."""
    arr = np.asarray(tokens, dtype=np.int32)
    keys, key = [], b""
    for j in range(arr.size // block_size):
        key = hashlib.blake2b(key + arr[j * block_size:(j + 1) * block_size].tobytes(), digest_size=16).digest()
        keys.append(key)
    return tuple(keys)


class PrefixCache:
    """Up to `capacity_blocks` cached blocks (key -> the block's KV, or None in the simulator),
    freed least recently used first."""

    def __init__(self, capacity_blocks: int, block_size: int = BLOCK_SIZE) -> None:
        self.capacity_blocks = count("prefix_cache_blocks", capacity_blocks)
        self.block_size = count("block_size", block_size)
        self.blocks: OrderedDict[Hashable, object] = OrderedDict()

    def __len__(self) -> int:
        return len(self.blocks)

    def match(self, keys: Sequence[Hashable]) -> list:
        """The cached blocks of the longest run of `keys` from the first (a read: recency is
        refreshed when the request that used them stores its prompt with `insert`)."""
        found = []
        for key in keys:
            if key not in self.blocks:
                break
            found.append(self.blocks[key])
        return found

    def insert(self, keys: Sequence[Hashable], block: Callable[[int], object] | None = None) -> None:
        """Store a prompt's full blocks (`block(j)`: block j's KV, asked only for blocks not cached),
        mark them all used now, then free the least recently used beyond the capacity."""
        # the last blocks are marked first, so they go before the first ones, which more prompts share
        # (vLLM frees a finished request's blocks tail first too)
        for j in reversed(range(len(keys))):
            if keys[j] in self.blocks:
                self.blocks.move_to_end(keys[j])
            else:
                self.blocks[keys[j]] = None if block is None else block(j)
        while len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)


def kv_block(cache, j: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """A copy of block j's keys and values from a `KVCache` (what the real path caches)."""
    lo, hi = j * block_size, (j + 1) * block_size
    return cache.k[:, :, lo:hi].copy(), cache.v[:, :, lo:hi].copy()


def load_blocks(cache, blocks: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    """Start an empty `KVCache` with cached blocks (the prompt positions they cover are not computed)."""
    if cache.length:
        raise ValueError(f"prefix blocks go into an empty cache, this one holds {cache.length} tokens")
    at = 0
    for k, v in blocks:
        cache.reserve(at + k.shape[2])
        cache.k[:, :, at:at + k.shape[2]] = k
        cache.v[:, :, at:at + k.shape[2]] = v
        at += k.shape[2]
    cache.length = at
