"""`BlockManager`: fixed-size KV blocks, block tables, ref counts and the prefix cache.

Paged mode hands a sequence a new block exactly when its last one fills. Contiguous mode is the
"traditional preallocation" baseline: a request reserves `ceil(max_model_len / block_size)`
blocks at admission and keeps them until it finishes, so both run on the same code.

Prefix caching (vLLM's automatic prefix caching): a full, computed block is named by a chained
hash of (previous block's hash, its token ids). A freed block keeps its hash and stays reusable
until it is evicted, least recently freed first, when a fresh block is needed.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from kvplan.engine.sequence import Sequence, SequenceStatus


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full, computed and registered in the cache
    token_ids: tuple[int, ...] = ()  # kept with the hash to rule out hash collisions


def chain_hash(prev_hash: int | None, token_ids: list[int] | tuple[int, ...]) -> int:
    """Hash of a full block given its predecessor's (Python's int/tuple hash is not salted)."""
    return hash((prev_hash if prev_hash is not None else -1, tuple(token_ids)))


class BlockManager:
    """Owns the device pool's block ids (and the CPU swap pool's); never touches tensors.

    A block is *used* (ref_count > 0), *cached* (free but holding a registered prefix hash,
    reusable on a hit) or *free* (no content). `num_free_blocks` counts cached ones too, since
    they are evicted on demand.
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False,
                 reserve_blocks_per_seq: int | None = None, num_cpu_blocks: int = 0) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.reserve_blocks_per_seq = reserve_blocks_per_seq  # contiguous mode when set
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))  # no content: handed out first
        self._cached: OrderedDict[int, None] = OrderedDict()  # free with a hash, oldest first (LRU)
        self._hash_to_block: dict[int, int] = {}
        self.num_cpu_blocks = num_cpu_blocks
        self._cpu_free: list[int] = list(range(num_cpu_blocks - 1, -1, -1))

    # --- accounting ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free) + len(self._cached)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_free_cpu_blocks(self) -> int:
        return len(self._cpu_free)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks a sequence of `num_tokens` holds (contiguous mode: its whole reservation)."""
        paged = -(-num_tokens // self.block_size)
        return max(paged, self.reserve_blocks_per_seq or 0)

    # --- prefix cache -------------------------------------------------------------------------
    def _block_hashes(self, seq: Sequence, num_blocks: int) -> list[int]:
        """Chained hashes of the first `num_blocks` full blocks of `seq` (memoised on the sequence)."""
        hashes = seq.block_hashes
        while len(hashes) < num_blocks:
            i = len(hashes)
            hashes.append(chain_hash(hashes[-1] if hashes else None, seq.block_tokens(i, self.block_size)))
        return hashes[:num_blocks]

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached block ids for the longest prefix of `seq` whose full blocks are cached.

        At least one token is always left to compute: the step that computes it yields logits.
        """
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        for i, h in enumerate(self._block_hashes(seq, (len(seq) - 1) // self.block_size)):
            block_id = self._hash_to_block.get(h)
            if block_id is None or self.blocks[block_id].token_ids != tuple(seq.block_tokens(i, self.block_size)):
                break
            hits.append(block_id)
        return hits

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register the hashes of `seq`'s blocks that are now full and computed."""
        if not self.enable_prefix_caching:
            return
        num_full = seq.num_computed_tokens // self.block_size
        for i, h in enumerate(self._block_hashes(seq, num_full)):
            block = self.blocks[seq.block_table[i]]
            if block.hash is not None or h in self._hash_to_block:
                continue  # already cached, or the same content sits in another block: keep that one
            block.hash, block.token_ids = h, tuple(seq.block_tokens(i, self.block_size))
            self._hash_to_block[h] = block.block_id

    # --- allocation ---------------------------------------------------------------------------
    def _take_free_block(self) -> int:
        if self._free:
            block_id = self._free.popleft()
        else:  # evict the least recently freed cached block
            block_id, _ = self._cached.popitem(last=False)
            block = self.blocks[block_id]
            if block.hash is not None:  # a cached block always has one
                del self._hash_to_block[block.hash]
            block.hash, block.token_ids = None, ()
        self.blocks[block_id].ref_count = 1
        return block_id

    def _ref(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self._cached[block_id]  # a prefix hit revives a cached free block
        block.ref_count += 1

    def can_allocate(self, seq: Sequence, hits: list[int], num_tokens: int) -> bool:
        """Whether a waiting `seq` can hold `num_tokens` tokens, reusing the prefix `hits`."""
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        return self.blocks_needed(num_tokens) - len(hits) <= self.num_free_blocks - revived

    def allocate(self, seq: Sequence, hits: list[int], num_tokens: int) -> None:
        """Admit `seq`: its block table becomes `hits` plus fresh blocks for `num_tokens` tokens."""
        assert not seq.block_table, f"{seq} already holds blocks"
        for block_id in hits:
            self._ref(block_id)
        seq.block_table = list(hits) + [
            self._take_free_block() for _ in range(self.blocks_needed(num_tokens) - len(hits))
        ]
        seq.num_computed_tokens = seq.num_cached_tokens = len(hits) * self.block_size

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow a running `seq` to hold `num_new_tokens` more tokens; False (and no change) if full."""
        missing = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if missing > self.num_free_blocks:
            return False
        seq.block_table.extend(self._take_free_block() for _ in range(missing))
        return True

    def free(self, seq: Sequence) -> None:
        """Release every block of `seq` (device blocks, or CPU blocks if it is swapped out)."""
        if seq.status is SequenceStatus.SWAPPED:
            self._cpu_free.extend(reversed(seq.block_table))
        else:
            for block_id in reversed(seq.block_table):  # tail first, so a prefix outlives its suffix in the LRU
                self._unref(block_id)
        seq.block_table = []

    def _unref(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        assert block.ref_count >= 0, f"block {block_id} freed twice"
        if block.ref_count == 0:
            if block.hash is not None:
                self._cached[block_id] = None
            else:
                self._free.append(block_id)

    # --- swapping -----------------------------------------------------------------------------
    def _num_swapped_blocks(self, seq: Sequence) -> int:
        return -(-seq.num_computed_tokens // self.block_size)  # only blocks holding computed K/V travel

    def can_swap_out(self, seq: Sequence) -> bool:
        return self._num_swapped_blocks(seq) <= len(self._cpu_free)

    def swap_out(self, seq: Sequence) -> list[tuple[int, int]]:
        """Move `seq`'s computed blocks to the CPU pool; returns (device, cpu) block pairs to copy."""
        n = self._num_swapped_blocks(seq)
        pairs = [(device, self._cpu_free.pop()) for device in seq.block_table[:n]]
        for block_id in reversed(seq.block_table):
            self._unref(block_id)
        seq.block_table = [cpu for _, cpu in pairs]
        return pairs

    def can_swap_in(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq.num_computed_tokens + num_new_tokens) <= self.num_free_blocks

    def swap_in(self, seq: Sequence) -> list[tuple[int, int]]:
        """Bring `seq` back to the device pool; returns (cpu, device) block pairs to copy."""
        pairs = [(cpu, self._take_free_block()) for cpu in seq.block_table]
        self._cpu_free.extend(reversed(seq.block_table))
        seq.block_table = [device for _, device in pairs]
        return pairs

    # --- checks -------------------------------------------------------------------------------
    def check_invariants(self, live: list[Sequence]) -> None:
        """Ref counts equal table occurrences; every block is exactly one of used, cached, free."""
        refs = [0] * self.num_blocks
        cpu_used: list[int] = []
        for seq in live:
            if seq.status is SequenceStatus.SWAPPED:
                cpu_used.extend(seq.block_table)
            else:
                for block_id in seq.block_table:
                    refs[block_id] += 1
        assert refs == [b.ref_count for b in self.blocks], "ref counts do not match the block tables"
        free, cached = set(self._free), set(self._cached)
        assert len(free) == len(self._free) and not free & cached, "a free block is listed twice"
        assert {b.block_id for b in self.blocks if b.ref_count == 0} == free | cached, (
            "free lists do not match ref counts"
        )
        assert all(self.blocks[b].hash is not None for b in cached) and all(self.blocks[b].hash is None for b in free)
        assert all(self._hash_to_block[b.hash] == b.block_id for b in self.blocks if b.hash is not None)
        assert len(self._hash_to_block) == sum(b.hash is not None for b in self.blocks)
        assert sorted(cpu_used + self._cpu_free) == list(range(self.num_cpu_blocks)), "CPU pool blocks leaked"
