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
