"""The KV block manager (`batchlab.batching.blocks`): a paged pool's bookkeeping, reference counts,
prefix caching by chained block hashes, the free queue that keeps hashes until it must evict."""

from __future__ import annotations

import pytest

from batchlab.batching import BlockManager, BlockTable, block_key


def tokens(n: int, salt: int = 0, shared: int = 0) -> list[int]:
    """n token ids; the first `shared` the same for every salt."""
    return [5 + (j * 7 + (salt if j >= shared else 0) * 13) % 40 for j in range(n)]


def test_a_table_takes_a_block_only_when_it_grows_into_one():
    m = BlockManager(4, block_size=16)
    t = BlockTable()
    assert m.allocate(t, 1) and len(t.blocks) == 1 and m.num_used == 1
    assert m.allocate(t, 16) and len(t.blocks) == 1          # 16 tokens: still one block
    assert m.allocate(t, 17) and len(t.blocks) == 2          # the 17th opens the second
    assert m.blocks_for(0) == 0 and m.blocks_for(33) == 3
    other = BlockTable()
    assert m.allocate(other, 32) and m.num_free == 0
    assert not m.can_allocate(other, 33) and not m.allocate(other, 33)
    assert len(other.blocks) == 2                             # a failed allocation changes nothing
    m.free(t)
    assert t.blocks == [] and m.num_free == 2 and m.allocate(other, 48) and m.peak_used == 4


def test_keys_are_chained_so_a_key_names_the_whole_prefix():
    a, b = [5] * 16, [6] * 16
    assert block_key(block_key(b"", a), b) != block_key(block_key(b"", [7] * 16), b)
    assert block_key(b"", a) == block_key(b"", list(a)) and block_key(b"", a) != block_key(b"", b)


def test_a_prefix_hit_shares_the_full_blocks_and_allocates_none_for_them():
    m = BlockManager(16, block_size=16, prefix_caching=True)
    first, second = tokens(60, 1, shared=40), tokens(60, 2, shared=40)
    ta = BlockTable()
    assert m.allocate(ta, 60, first, 60)                    # 4 blocks; its 3 full ones are cached
    assert m.num_used == 4 and len(m.cached) == 3
    tb = BlockTable()
    hits = m.cached_prefix(tb, second)                        # 40 shared tokens: 2 full blocks
    assert hits == ta.blocks[:2]
    used = m.num_used
    assert m.allocate(tb, 60, second, 60, hits)
    assert tb.blocks[:2] == ta.blocks[:2] and m.num_used == used + 2   # only its own 2 blocks are new
    assert [m.ref[b] for b in ta.blocks] == [2, 2, 1, 1]
    assert m.usage([(ta, 60), (tb, 60)]) == (6, 32 + 2 * 28)  # a shared block counts once


def test_the_last_prompt_token_is_never_taken_from_the_cache():
    m = BlockManager(8, block_size=16, prefix_caching=True)
    prompt = tokens(32)
    m.allocate(BlockTable(), 32, prompt, 32)                  # both blocks cached
    assert len(m.cached_prefix(BlockTable(), prompt)) == 1    # the same 32 tokens: 1 block, its last is computed
    assert len(m.cached_prefix(BlockTable(), prompt + [9])) == 2


def test_a_freed_block_keeps_its_hash_until_an_allocation_evicts_it_least_recently_used_first():
    m = BlockManager(6, block_size=16, prefix_caching=True)
    a, b = tokens(64, 1), tokens(33, 2)
    ta, tb = BlockTable(), BlockTable()
    m.allocate(ta, 64, a, 64)                                 # 4 blocks, all cached
    m.free(ta)
    assert m.num_used == 0 and m.num_cached_free == 4         # free, but still cached
    assert len(m.cached_prefix(BlockTable(), a + [3])) == 4   # and still hit
    m.allocate(tb, 33, b, 33)                                 # 3 blocks: 2 never used, then 1 evicted
    assert len(m.cached_prefix(BlockTable(), a + [3])) == 3   # a's tail went first (freed tail first)
    hit = BlockTable()
    hits = m.cached_prefix(hit, a + [3])
    assert m.allocate(hit, 65, a + [3], 65, hits) is False    # 3 revived + 2 new > 3 free: nothing changes
    assert hit.blocks == [] and m.num_cached_free == 3
    assert m.allocate(hit, 48, a + [3], 48, hits) and m.num_free == 0 and m.num_cached_free == 0


def test_truncate_releases_the_blocks_past_the_kept_tokens():
    m = BlockManager(8, block_size=16, prefix_caching=True)
    t = BlockTable()
    m.allocate(t, 50, tokens(50), 50)
    tail = t.blocks[2:]
    m.truncate(t, 20)                                         # a rollback (rejected speculative tokens)
    assert len(t.blocks) == 2 and m.num_used == 2 and len(t.keys) == 1
    # block 1 stays but keeps only 4 of its 16 tokens: its key would name KV it will no longer hold
    assert all(m.key[b] is None for b in tail) and m.key[t.blocks[1]] is None and len(m.cached) == 1
    m.truncate(t, 0)
    assert t.blocks == [] and m.num_used == 0


def test_an_unlimited_pool_and_bad_sizes():
    m = BlockManager(None, block_size=4)
    t = BlockTable()
    assert m.allocate(t, 10_000) and m.num_used == 2500 and m.num_free == float("inf")
    with pytest.raises(ValueError, match="num_blocks"):
        BlockManager(0)
    with pytest.raises(ValueError, match="block_size"):
        BlockManager(8, block_size=0)
