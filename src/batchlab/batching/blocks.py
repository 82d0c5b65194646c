"""The KV block manager, as vLLM and nano-vllm keep KV memory (PagedAttention, Kwon et al. SOSP '23;
vLLM ``v1/core/block_pool.py``, ``kv_cache_manager.py``; nano-vllm ``engine/block_manager.py``).

One pool of `num_blocks` blocks of `block_size` token slots each. A sequence's `BlockTable` lists, in
order, the physical blocks that hold its tokens (logical block j -> ``table.blocks[j]``), so its KV
need not be contiguous and it takes a block only when it grows into one. This module only decides
which block ids; the storage is the LM's `KVPool`, read through the same tables.

Prefix caching: a full block is named by a key, the hash of its tokens chained with the previous
block's key (so a key names the whole prefix). A request whose prompt starts with cached keys points
its table at those very blocks (reference count + 1: no copy, no new memory). A block nobody holds
goes to the free queue *with* its key: it can still be hit until an allocation needs a block and
evicts it, least recently freed first.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from batchlab._validate import count

#: Token slots per block (vLLM's default).
BLOCK_SIZE = 16


def block_key(parent: bytes, tokens: Sequence[int]) -> bytes:
    """A full block's key: a hash of its tokens chained with the key of the block before it
    (``b""`` for the first), so two blocks share a key only if their whole prefixes agree."""
    return hashlib.blake2b(parent + array("q", tokens).tobytes(), digest_size=16).digest()


@dataclass(eq=False, slots=True)
class BlockTable:
    """One sequence's blocks in order (logical block j is physical block ``blocks[j]``), the keys
    of its full blocks computed so far (they outlive a preemption, as vLLM's request.block_hashes
    do) and how many of its blocks were offered to the cache."""

    blocks: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    n_keyed: int = 0


class BlockManager:
    """The pool's blocks: reference counts, the free queue (least recently freed first) and the
    keys of cached full blocks. ``num_blocks=None``: as many as asked for (the simulator's
    unlimited memory). Every KV question of the scheduler goes through `can_allocate`,
    `allocate`, `free`, `truncate` and, with `prefix_caching`, `cached_prefix`."""

    def __init__(self, num_blocks: int | None, block_size: int = BLOCK_SIZE, prefix_caching: bool = False) -> None:
        self.num_blocks = None if num_blocks is None else count("num_blocks", num_blocks)
        self.block_size = count("block_size", block_size)
        self.prefix_caching = bool(prefix_caching)
        self.ref: list[int] = []               # per block: tables that hold it
        self.key: list[bytes | None] = []      # per block: its key while it is in the cache
        self.cached: dict[bytes, int] = {}     # key -> the block holding that full block's KV
        self.free_queue: OrderedDict[int, None] = OrderedDict()  # freed blocks, evicted from the front
        self.peak_used = 0

    @property
    def num_free(self) -> float:
        """Blocks an allocation may take: never used, or freed (cached ones included)."""
        never_used = float("inf") if self.num_blocks is None else self.num_blocks - len(self.ref)
        return never_used + len(self.free_queue)

    @property
    def num_used(self) -> int:
        """Blocks some table holds."""
        return len(self.ref) - len(self.free_queue)

    @property
    def num_cached_free(self) -> int:
        """Free blocks that still hold a cached full block (a hit revives them)."""
        return sum(1 for b in self.free_queue if self.key[b] is not None)

    def blocks_for(self, n_tokens: int) -> int:
        """Blocks that hold `n_tokens` tokens."""
        return -(-n_tokens // self.block_size)

    def cached_prefix(self, table: BlockTable, tokens: Sequence[int]) -> list[int]:
        """The cached blocks of the longest run of `tokens`' full blocks, for an empty `table` (a read).
        The last token is never taken from the cache: its logits give the next token."""
        if not self.prefix_caching or table.blocks:
            return []
        hits = []
        for key in self._keys(table, tokens, (len(tokens) - 1) // self.block_size):
            block = self.cached.get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    def can_allocate(self, table: BlockTable, n_tokens: int, hits: Sequence[int] = ()) -> bool:
        """Whether `table` (sharing `hits` first) can grow to hold `n_tokens` tokens."""
        new = -(-n_tokens // self.block_size) - len(table.blocks) - len(hits)
        if not hits:
            return new <= 0 or new <= self.num_free
        revived = sum(1 for b in hits if self.ref[b] == 0)  # a free cached block leaves the free queue
        return max(new, 0) + revived <= self.num_free

    def allocate(self, table: BlockTable, n_tokens: int, tokens: Sequence[int] = (), computed: int = 0,
                 hits: Sequence[int] = ()) -> bool:
        """Grow `table` to hold `n_tokens` tokens: share the `hits` (reference + 1, no copy), then take
        free blocks; False (nothing changed) if the pool lacks them. The first `computed` of its
        `tokens` have KV once this step has run: their full blocks become cacheable now (vLLM caches
        blocks when it schedules them)."""
        need = -(-n_tokens // self.block_size)
        if hits or need > len(table.blocks):
            if not self.can_allocate(table, n_tokens, hits):
                return False
            for block in hits:
                if self.ref[block] == 0:
                    del self.free_queue[block]
                self.ref[block] += 1
                table.blocks.append(block)
            table.n_keyed = max(table.n_keyed, len(hits))
            while len(table.blocks) < need:
                table.blocks.append(self._take())
            self.peak_used = max(self.peak_used, self.num_used)
        if self.prefix_caching:
            self._cache_full_blocks(table, tokens, min(computed, len(tokens)) // self.block_size)
        return True

    def free(self, table: BlockTable) -> None:
        """Release all of `table`'s blocks (finished or preempted); each block nobody else holds joins
        the free queue, keeping its key. The tail goes first: it is evicted before the prefix blocks
        other requests are likelier to share."""
        for block in reversed(table.blocks):
            self._release(block)
        table.blocks, table.n_keyed = [], 0

    def truncate(self, table: BlockTable, n_tokens: int, hold_tokens: int = 0) -> None:
        """Keep only the first `n_tokens` tokens (a rollback, e.g. of rejected speculative tokens):
        blocks past those holding max(n_tokens, `hold_tokens`) tokens are released; every block past
        the first n_tokens' full ones leaves the cache (its slots will hold other tokens)."""
        keep = self.blocks_for(max(n_tokens, hold_tokens))
        full = n_tokens // self.block_size
        if any(self.ref[b] > 1 for b in table.blocks[full:keep]):
            raise ValueError(f"cannot keep {n_tokens} tokens: a block past them that stays is shared")
        for block in reversed(table.blocks[full:]):
            self._uncache(block)
        for block in reversed(table.blocks[keep:]):
            self._release(block)
        del table.blocks[keep:]
        del table.keys[full:]
        table.n_keyed = min(table.n_keyed, full)

    def usage(self, held: Iterable[tuple[BlockTable, int]]) -> tuple[int, int]:
        """For (table, tokens stored) pairs: blocks they hold and the slots of those blocks that hold
        a token (a block several tables share counts once)."""
        fill: dict[int, int] = {}
        for table, n in held:
            for j, block in enumerate(table.blocks):
                fill[block] = max(fill.get(block, 0), min(self.block_size, max(0, n - j * self.block_size)))
        return len(fill), sum(fill.values())

    def reset_cache(self) -> None:
        """Forget every cached key (after a failed step whose blocks may be half written)."""
        self.cached.clear()
        self.key = [None] * len(self.key)

    def _keys(self, table: BlockTable, tokens: Sequence[int], n: int) -> list[bytes]:
        """The keys of the first `n` full blocks of `tokens`, computed once per table."""
        size = self.block_size
        while len(table.keys) < n:
            j = len(table.keys)
            table.keys.append(block_key(table.keys[-1] if j else b"", tokens[j * size:(j + 1) * size]))
        return table.keys[:n]

    def _cache_full_blocks(self, table: BlockTable, tokens: Sequence[int], n_full: int) -> None:
        """Offer the table's first `n_full` blocks to the cache (a key already cached keeps its block)."""
        n = min(n_full, len(table.blocks))
        for j, key in enumerate(self._keys(table, tokens, n)[table.n_keyed:], start=table.n_keyed):
            block = table.blocks[j]
            if key not in self.cached and self.key[block] is None:
                self.cached[key], self.key[block] = block, key
        table.n_keyed = max(table.n_keyed, n)

    def _take(self) -> int:
        """A block for a table: a never-used one, else the least recently freed (evicting what it cached)."""
        if self.num_blocks is None or len(self.ref) < self.num_blocks:
            self.ref.append(1)
            self.key.append(None)
            return len(self.ref) - 1
        block, _ = self.free_queue.popitem(last=False)
        self._uncache(block)
        self.ref[block] = 1
        return block

    def _release(self, block: int) -> None:
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free_queue[block] = None

    def _uncache(self, block: int) -> None:
        key = self.key[block]
        if key is not None and self.ref[block] <= 1:
            del self.cached[key]
            self.key[block] = None
