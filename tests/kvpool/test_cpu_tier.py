"""`CpuTier` against vLLM 0.19.1's v1/kv_offload/cpu/manager.py (`prepare_store` filters held
blocks, evicts with the policy, never an offered block; `lookup` counts ready blocks from the
first; `complete_store` makes them ready) and policies/lru.py (`touch` moves to the end in reverse,
`evict` takes from the front blocks with ref_cnt 0, None if too few). Expected orders by hand."""
from __future__ import annotations

from kvplan.kvpool.cpu_tier import CpuTier


def test_a_stored_block_is_readable_only_once_its_copy_ends() -> None:
    tier = CpuTier(4)
    assert tier.store([1, 2]) == [1, 2]
    assert tier.lookup([1, 2]) == 0
    tier.stored([1, 2])
    assert tier.lookup([1, 2, 3]) == 2 and tier.lookup([2]) == 1 and tier.lookup([3, 1]) == 0


def test_lru_eviction_spares_offered_and_read_blocks() -> None:
    tier = CpuTier(3)
    tier.stored(tier.store([1, 2, 3]) or [])  # LRU order 1 2 3
    tier.read([1])  # being loaded: not evictable
    assert tier.store([2, 4]) == [4]  # 2 is held (skipped, protected); 1 is read: 3 goes
    assert list(tier.blocks) == [1, 2, 4] and tier.evicted_blocks == 1
    tier.read_done([1])
    tier.stored([4])
    tier.touch([4, 1])  # reversed: 1 then 4 to the end: order 2 1 4
    assert list(tier.blocks) == [2, 1, 4]
    assert tier.store([5]) == [5] and list(tier.blocks) == [1, 4, 5]


def test_no_room_stores_nothing() -> None:
    tier = CpuTier(2)
    tier.store([1, 2])  # both pending: not evictable
    assert tier.store([3]) is None and tier.refused_blocks == 1 and list(tier.blocks) == [1, 2]


def test_host_blocks_fresh_first_then_the_last_freed() -> None:
    """vLLM's CPUOffloadingManager._allocate_blocks: never-used host blocks first, then its free
    list popped from the end (the last freed)."""
    tier = CpuTier(3)
    tier.stored(tier.store([1, 2, 3]) or [])
    assert [tier.slot[h] for h in (1, 2, 3)] == [0, 1, 2]
    tier.store([4, 5])  # evicts 1 then 2 (LRU): slots 0, 1 freed in that order; 4 takes 1, 5 takes 0
    assert (tier.slot[4], tier.slot[5]) == (1, 0)


def test_a_tier_filled_exactly_evicts_nothing() -> None:
    tier = CpuTier(4)
    tier.stored(tier.store([1, 2]) or [])
    assert tier.store([3, 4]) == [3, 4]  # 2 + 2 = 4 blocks: room without an eviction
    tier.stored([3, 4])
    assert tier.lookup([1, 2]) == 2 and tier.evicted_blocks == 0


def test_counters_add_up_over_stores() -> None:
    tier = CpuTier(2)
    tier.stored(tier.store([1]) or [])
    tier.stored(tier.store([2]) or [])
    assert tier.stored_blocks == 2
    tier.stored(tier.store([3]) or [])  # evicts 1
    tier.stored(tier.store([4]) or [])  # evicts 2
    assert (tier.stored_blocks, tier.evicted_blocks) == (4, 2)
    tier.read([3, 4])
    assert tier.store([5]) is None and tier.store([6]) is None  # both pinned: no room, twice
    assert tier.refused_blocks == 2


def test_a_block_read_twice_stays_pinned_until_both_reads_end() -> None:
    tier = CpuTier(1)
    tier.stored(tier.store([1]) or [])
    tier.read([1])
    tier.read([1])  # two requests load it
    tier.read_done([1])
    assert tier.store([2]) is None  # still read by one
    tier.read_done([1])
    assert tier.store([2]) == [2] and tier.evicted_blocks == 1


def test_a_failed_store_frees_its_host_block() -> None:
    """vLLM's complete_store(success=False): the block is forgotten and its host block reused."""
    tier = CpuTier(2)
    assert tier.store([1, 2]) == [1, 2] and (tier.slot[1], tier.slot[2]) == (0, 1)
    tier.unstore([1])
    assert 1 not in tier.blocks and 1 not in tier.slot and tier.stored_blocks == 1
    assert tier.store([3]) == [3] and tier.slot[3] == 0  # no fresh block left: the freed one
    tier.stored([2])
    tier.unstore([2])  # already readable: a finished copy is not undone
    assert tier.lookup([2]) == 1 and tier.stored_blocks == 2
