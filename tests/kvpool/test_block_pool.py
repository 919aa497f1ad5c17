"""`BlockPool` against vLLM 0.19.1's v1/core/block_pool.py and single_type_kv_cache_manager.py.
Each expected block id is worked out by hand from those files' rules:

- `BlockPool.__init__`: the free queue holds every block in id order;
- `get_new_blocks`: `popleft_n` from the head, `_maybe_evict_cached_block` drops a head block's hash;
- `free_blocks`: ref_cnt - 1, blocks reaching 0 `append_n` to the tail in the order given, and
  `SingleTypeKVCacheManager.free` gives a request's blocks `reversed` (tail block evicted first);
- `touch`: a hit with ref_cnt 0 leaves the free queue;
- `get_num_blocks_to_allocate`: new blocks plus hits with ref_cnt 0 ("evictable computed blocks");
- `BlockHashToBlockMap`: no de-duplication, `get_one_block` returns the first registered.
"""
from __future__ import annotations

import pytest

from kvplan.kvpool.block_pool import BlockPool


def test_new_blocks_come_from_the_head_and_a_request_frees_its_tail_first() -> None:
    pool = BlockPool(5)
    a = pool.allocate(3)
    assert a == [0, 1, 2]
    pool.free(reversed(a))  # queue: 3 4 2 1 0
    assert list(pool.free_queue) == [3, 4, 2, 1, 0]
    assert pool.allocate(3) == [3, 4, 2]


def test_a_cached_block_at_the_head_is_evicted_before_a_never_used_block_behind_it() -> None:
    pool = BlockPool(3)
    a = pool.allocate(2)  # [0, 1]
    pool.cache_blocks(a, [111], 0, 1)  # its first block full and registered
    b = pool.allocate(1)  # [2]
    pool.free(reversed(a))  # queue: 1 0
    pool.free(reversed(b))  # queue: 1 0 2
    assert pool.allocate(2) == [1, 0]
    assert pool.lookup([111]) == [] and pool.evicted_blocks == 1
    assert list(pool.free_queue) == [2]


def test_a_hit_leaves_the_free_queue_and_counts_against_free_blocks() -> None:
    pool = BlockPool(4)
    a = pool.allocate(2)
    pool.cache_blocks(a, [7, 8], 0, 2)
    pool.free(reversed(a))  # queue: 2 3 1 0
    hits = pool.lookup([7, 8, 9])
    assert hits == [0, 1]
    assert pool.num_to_allocate(hits, 2) == 4  # 2 new + 2 hits that leave the queue
    pool.touch(hits)
    assert list(pool.free_queue) == [2, 3] and pool.ref[0] == pool.ref[1] == 1
    pool.touch(hits)  # a second request on the same prefix: shared, nothing leaves the queue
    assert pool.ref[0] == 2 and pool.num_to_allocate(hits, 1) == 1


def test_duplicate_blocks_are_both_registered_and_the_first_is_looked_up() -> None:
    pool = BlockPool(4)
    x, y = pool.allocate(1), pool.allocate(1)
    pool.cache_blocks(x, [5], 0, 1)
    pool.cache_blocks(y, [5], 0, 1)
    assert pool.lookup([5]) == x
    pool.free(x)
    pool.free(y)  # queue: 2 3 0 1
    assert pool.allocate(3) == [2, 3, 0]  # block 0's copy of hash 5 evicted, block 1's remains
    assert pool.lookup([5]) == y
    pool.check()


def test_freeing_a_block_twice_is_caught() -> None:
    pool = BlockPool(2)
    b = pool.allocate(1)
    pool.free(b)
    with pytest.raises(AssertionError):
        pool.free(b)


def test_taking_more_blocks_than_are_free_raises() -> None:
    with pytest.raises(ValueError):
        BlockPool(2).allocate(3)


def test_a_new_pool_is_all_free_and_consistent() -> None:
    pool = BlockPool(3)
    assert (pool.num_blocks, pool.num_free_blocks, pool.num_used_blocks, pool.num_cached_free_blocks) == (3, 3, 0, 0)
    pool.check()  # every block unowned (ref 0) and in the queue


def test_lookup_stops_at_its_limit_and_at_the_hashes_end() -> None:
    pool = BlockPool(4)
    blocks = pool.allocate(3)
    pool.cache_blocks(blocks, [7, 8, 9], 0, 3)
    assert pool.lookup([7, 8, 9], limit=2) == blocks[:2]  # vLLM looks up all but the last token's block
    assert pool.lookup([7, 8, 9], limit=10) == blocks and pool.lookup([7, 8, 9]) == blocks
    assert pool.lookup([7, 5, 9]) == blocks[:1]  # the first miss ends the prefix


def test_registering_a_later_range_leaves_the_earlier_blocks_alone() -> None:
    pool = BlockPool(4)
    blocks = pool.allocate(4)
    pool.cache_blocks(blocks, [1, 2, 3, 4], 0, 2)
    pool.cache_blocks(blocks, [1, 2, 3, 4], 2, 4)  # a request's next full blocks (vLLM: num_cached_block on)
    assert pool.lookup([1, 2, 3, 4]) == blocks
    with pytest.raises(AssertionError, match=f"block {blocks[0]} is registered already"):
        pool.cache_blocks(blocks, [1, 2, 3, 4], 0, 1)


def test_every_change_to_the_cache_moves_its_version_and_evictions_add_up() -> None:
    pool = BlockPool(2)
    seen = [pool.version]
    a = pool.allocate(2)
    pool.cache_blocks(a, [1, 2], 0, 1)
    seen.append(pool.version)
    pool.cache_blocks(a, [1, 2], 1, 2)
    seen.append(pool.version)
    pool.free(reversed(a))
    pool.allocate(1)  # evicts hash 2 (block a[1], freed first)
    seen.append(pool.version)
    pool.allocate(1)  # evicts hash 1
    seen.append(pool.version)
    assert seen == sorted(set(seen)) and pool.evicted_blocks == 2  # strictly increasing: a kept answer goes stale
    assert pool.lookup([1]) == [] and pool.lookup([2]) == []


def test_a_shared_block_stays_owned_until_its_last_holder_frees_it() -> None:
    pool = BlockPool(3)
    a = pool.allocate(1)
    pool.cache_blocks(a, [5], 0, 1)
    pool.touch(a)  # a second request hits it: ref 2
    pool.free(a)
    assert pool.num_free_blocks == 2 and pool.num_used_blocks == 1
    pool.free(a)
    assert pool.num_free_blocks == 3 and pool.num_cached_free_blocks == 1
    with pytest.raises(AssertionError, match=f"block {a[0]} freed twice"):
        pool.free(a)


def test_the_shortage_names_the_blocks() -> None:
    with pytest.raises(ValueError, match="cannot take 3 blocks: 2 free"):
        BlockPool(2).allocate(3)


def test_forgetting_an_unfilled_block_is_not_an_eviction() -> None:
    """A failed step's blocks lose their hashes (their K/V was never written): the engine's
    `forget_uncomputed`; vLLM's counters never saw them as cached."""
    pool = BlockPool(2)
    a = pool.allocate(2)
    pool.cache_blocks(a, [1, 2], 0, 2)
    before = pool.version
    pool.uncache(a[1])
    assert pool.lookup([1, 2]) == a[:1] and pool.hash_of[a[1]] is None
    assert pool.evicted_blocks == 0 and pool.version != before
    pool.uncache(a[1])  # no hash: nothing to forget
    assert pool.evicted_blocks == 0
    pool.check()
