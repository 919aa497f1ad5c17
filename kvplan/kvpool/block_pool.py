"""`BlockPool`: vLLM V1's KV block pool (v1/core/block_pool.py, 0.10 to 0.19), by block id.

    free queue   every block with no owner, least recently freed at the head; a new block is
                 taken from the head, and if it still holds a hash that hash is evicted
    cache        hash -> the blocks holding it (vLLM never de-duplicates: two requests that
                 compute the same block each register theirs; a lookup takes the first)
    touch        a prefix hit: ref count + 1, out of the free queue if it was there
    free         ref count - 1; the blocks reaching 0 join the queue's tail in the order given
                 (vLLM's managers free a request's blocks last first, so a prefix outlives its suffix)

vLLM also takes one block out as the null block at start-up; kvplan's pools count every block the
start-up log reports as usable (the difference is one block).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import cast


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cache: dict[int, list[int]] = {}  # hash -> the blocks holding it, first registered first
        self.evicted_blocks = 0  # cached blocks whose hash a new allocation dropped
        self.version = 0  # changes whenever the cache does (a lookup's answer may be kept until then)

    @property
    def num_free_blocks(self) -> int:
        """Blocks a request can be given: never-used, freed and cached-but-unowned ones alike."""
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    @property
    def num_cached_free_blocks(self) -> int:
        """Unowned blocks that still hold a hash (a later request may hit them)."""
        hash_of = self.hash_of
        return sum(1 for b in self.free_queue if hash_of[b] is not None)

    def lookup(self, hashes: Sequence[int], limit: int | None = None) -> list[int]:
        """The blocks of the longest cached prefix of `hashes` (of its first `limit`; vLLM's
        `find_longest_cache_hit`)."""
        if limit is not None and limit < len(hashes):
            hashes = hashes[:limit]
        found = list(map(self.cache.get, hashes))  # one C loop; a conversation's turn mostly hits throughout
        if None in found:
            del found[found.index(None):]
        held = cast("list[list[int]]", found)  # no None left
        return list(map(itemgetter(0), held))  # each the first block registered under its hash

    def num_to_allocate(self, hits: Sequence[int], num_new_blocks: int) -> int:
        """Free blocks admitting a request takes: its new ones, plus the hits it takes out of the
        free queue (vLLM's `get_num_blocks_to_allocate`: evictable computed blocks count)."""
        ref = self.ref
        return num_new_blocks + [ref[b] for b in hits].count(0)

    def touch(self, blocks: Iterable[int]) -> None:
        ref, queue = self.ref, self.free_queue
        for b in blocks:
            if ref[b] == 0:
                del queue[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """`n` blocks from the free queue's head, their hashes evicted; raises if fewer are free."""
        if n > len(self.free_queue):
            raise ValueError(f"cannot take {n} blocks: {len(self.free_queue)} free")
        queue, ref, hash_of = self.free_queue, self.ref, self.hash_of
        out = []
        for _ in range(n):
            b, _ = queue.popitem(last=False)
            h = hash_of[b]
            if h is not None:
                self._uncache(b, h)
            ref[b] = 1
            out.append(b)
        return out

    def uncache(self, block: int) -> None:
        """Drop `block`'s hash, if it has one (its K/V was never written)."""
        h = self.hash_of[block]
        if h is not None:
            self._uncache(block, h)
            self.evicted_blocks -= 1  # not an eviction

    def _uncache(self, block: int, h: int) -> None:
        holders = self.cache[h]
        holders.remove(block)
        if not holders:
            del self.cache[h]
        self.hash_of[block] = None
        self.evicted_blocks += 1
        self.version += 1

    def cache_blocks(self, blocks: Sequence[int], hashes: Sequence[int], start: int, end: int) -> None:
        """Register blocks[start:end] (full, their K/V computed or being computed) under hashes[start:end]."""
        hash_of, cache = self.hash_of, self.cache
        self.version += 1
        for i in range(start, end):
            b, h = blocks[i], hashes[i]
            if hash_of[b] is not None:  # vLLM asserts the same: a block is registered once
                raise AssertionError(f"block {b} is registered already")
            hash_of[b] = h
            holders = cache.get(h)
            if holders is None:
                cache[h] = [b]
            else:
                holders.append(b)

    def free(self, blocks_in_eviction_order: Iterable[int]) -> None:
        """Drop one reference to each block; those left unowned join the free queue's tail in the
        order given (the first given is evicted first)."""
        ref = self.ref
        unowned = []
        for b in blocks_in_eviction_order:
            left = ref[b] - 1
            ref[b] = left
            if left <= 0:
                if left < 0:
                    raise AssertionError(f"block {b} freed twice")
                unowned.append(b)
        self.free_queue.update(dict.fromkeys(unowned))  # one C call: the tail, in the order given

    def check(self) -> None:
        """Every block is owned (ref > 0) or in the free queue, never both; the cache maps each
        hash to exactly the blocks holding it."""
        assert all((r == 0) == (b in self.free_queue) for b, r in enumerate(self.ref))
        held = {(h, b) for h, bs in self.cache.items() for b in bs}
        assert held == {(h, b) for b, h in enumerate(self.hash_of) if h is not None}
