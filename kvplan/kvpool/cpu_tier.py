"""`CpuTier`: vLLM's native CPU offloading store (`--kv-offloading-size`, the OffloadingConnector's
`CPUOffloadingManager` with its LRU policy; v1/kv_offload/cpu/manager.py and policies/lru.py, 0.19.1).

    store    every full block a request schedules is offered; blocks already held are skipped,
             room is made by evicting least recently used blocks no one is reading (never one of
             the offered ones); if there is not enough room nothing is stored (vLLM logs "cannot
             store" and offers them again next step). A stored block is readable once its copy ends.
    lookup   consecutive readable blocks from a start block; a request's lookup first touches all
             its full blocks (most recently used, in reverse so its first block ends last)
    load     a hit's blocks are read (pinned against eviction) until the copy back ends

Blocks are keyed by their chained hash (`block_hash`), the GPU pool's key, so a block evicted from
the GPU is found here if it was stored. The offloaded block is the GPU block (block_size_factor 1,
vLLM's default).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

PENDING = -1  # being stored: neither readable nor evictable (vLLM: ref_cnt -1 until complete_store)


class CpuTier:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks: OrderedDict[int, int] = OrderedDict()  # hash -> readers (PENDING while stored), LRU first
        self.slot: dict[int, int] = {}  # hash -> the host block holding it (vLLM's BlockStatus.block_id)
        self._fresh = 0  # host blocks never used (vLLM hands those out before reused ones)
        self._free_slots: list[int] = []
        self.stored_blocks = self.evicted_blocks = self.refused_blocks = 0

    def lookup(self, hashes: Sequence[int]) -> int:
        """How many of `hashes`, from the first, are readable here."""
        n = 0
        get = self.blocks.get
        for h in hashes:
            state = get(h)
            if state is None or state == PENDING:
                break
            n += 1
        return n

    def touch(self, hashes: Sequence[int]) -> None:
        """The held ones of `hashes` become the most recently used, the first last. vLLM touches a
        request's every full block each time it stores one, so this loop runs in C."""
        blocks = self.blocks
        deque(map(blocks.move_to_end, filter(blocks.__contains__, reversed(hashes))), maxlen=0)

    def store(self, hashes: Sequence[int]) -> list[int] | None:
        """Offer `hashes` (a request's newly full blocks): the ones now being stored, or None when
        there is no room for the new ones (nothing stored)."""
        blocks = self.blocks
        new = [h for h in hashes if h not in blocks]
        if not new:
            return []
        excess = len(blocks) + len(new) - self.num_blocks
        if excess > 0:
            offered = set(hashes)
            victims = []
            for h, state in blocks.items():
                if state == 0 and h not in offered:
                    victims.append(h)
                    if len(victims) == excess:
                        break
            if len(victims) < excess:
                self.refused_blocks += len(new)
                return None
            for h in victims:
                del blocks[h]
                self._free_slots.append(self.slot.pop(h))
            self.evicted_blocks += len(victims)
        for h in new:
            blocks[h] = PENDING
            if self._fresh < self.num_blocks:
                self.slot[h] = self._fresh
                self._fresh += 1
            else:
                self.slot[h] = self._free_slots.pop()
        self.stored_blocks += len(new)
        return new

    def unstore(self, hashes: Sequence[int]) -> None:
        """Their copies failed: forgotten, their host blocks free again (vLLM's complete_store
        with success=False)."""
        for h in hashes:
            if self.blocks.get(h) == PENDING:
                del self.blocks[h]
                self._free_slots.append(self.slot.pop(h))
                self.stored_blocks -= 1

    def stored(self, hashes: Sequence[int]) -> None:
        """Their copies ended: readable (and evictable)."""
        blocks = self.blocks
        for h in hashes:
            if blocks.get(h) == PENDING:
                blocks[h] = 0

    def read(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            self.blocks[h] += 1

    def read_done(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            self.blocks[h] -= 1
