"""`BlockManager`: fixed-size KV blocks, block tables, ref counts and the prefix cache.

Paged mode hands a sequence a new block exactly when its last one fills. Contiguous mode is the
"traditional preallocation" baseline: a request reserves `ceil(max_model_len / block_size)`
blocks at admission and keeps them until it finishes, so both run on the same code.

Prefix caching (vLLM's automatic prefix caching): a full, computed block is named by a chained
hash of (previous block's hash, its token ids). A freed block keeps its hash and stays reusable
until it is evicted: vLLM's one free queue hands out its head, least recently freed first, whether
that block holds a hash or not. Blocks are registered when scheduled, as in vLLM; a failed step's
unfilled blocks lose their hashes again (`forget_uncomputed`).
"""
from __future__ import annotations

from kvplan.engine.sequence import Sequence, SequenceStatus
from kvplan.kvpool.block_hash import chain_hash
from kvplan.kvpool.block_pool import BlockPool
from kvplan.kvpool.cpu_tier import CpuTier


class BlockManager:
    """Owns the device pool's block ids (a `kvpool.BlockPool`, vLLM's) and the CPU swap pool's;
    never touches tensors.

    A device block is *used* (some sequence holds it), *cached* (unowned but holding a registered
    prefix hash, reusable on a hit) or *free*; cached and free blocks share vLLM's one LRU free
    queue, so `num_free_blocks` counts both.
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_prefix_caching: bool = False,
                 reserve_blocks_per_seq: int | None = None, num_cpu_blocks: int = 0,
                 num_tier_blocks: int = 0) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.reserve_blocks_per_seq = reserve_blocks_per_seq  # contiguous mode when set
        self.pool = BlockPool(num_blocks)
        self._registered: dict[int, int] = {}  # seq_id -> its leading blocks registered in the cache
        self.num_cpu_blocks = num_cpu_blocks
        self._cpu_free: list[int] = list(range(num_cpu_blocks - 1, -1, -1))
        # a CPU tier (vLLM's native offloading): what each sequence offered it, and this step's
        # copies out ((device block, host block) pairs, and their hashes: readable once copied)
        self.tier = CpuTier(num_tier_blocks) if num_tier_blocks and enable_prefix_caching else None
        self._offered: dict[int, int] = {}
        self.stores: list[tuple[int, int]] = []
        self.store_hashes: list[int] = []

    # --- accounting ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        return self.pool.num_cached_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_used_blocks

    @property
    def num_evicted_blocks(self) -> int:
        """Cached blocks whose hash a new allocation has dropped so far."""
        return self.pool.evicted_blocks

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
        return self.pool.lookup(self._block_hashes(seq, (len(seq) - 1) // self.block_size))

    def cache_full_blocks(self, seq: Sequence, upto: int | None = None) -> None:
        """Register the hashes of `seq`'s blocks full once `upto` tokens (default: those computed)
        are; the scheduler registers them as it schedules them, as vLLM's `allocate_slots` does, so
        a request admitted later in the same step hits them (every K/V of a step is written before
        any attention reads). A block another sequence registered too is registered again: vLLM
        never de-duplicates."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens if upto is None else upto, len(seq)) // self.block_size
        done = self._registered.get(seq.seq_id, 0)
        if num_full > done:
            self.pool.cache_blocks(seq.block_table, self._block_hashes(seq, num_full), done, num_full)
            self._registered[seq.seq_id] = num_full
            if self.tier is not None:
                self._offload(seq, num_full)

    # --- the CPU tier ---------------------------------------------------------------------------
    def _offload(self, seq: Sequence, num_full: int) -> None:
        """Offer `seq`'s newly full blocks to the tier (vLLM: each step's scheduled requests)."""
        assert self.tier is not None
        done = self._offered.get(seq.seq_id, 0)
        if num_full <= done:
            return
        hashes = self._block_hashes(seq, num_full)
        new = self.tier.store(hashes[done:num_full])
        if new is None:
            return  # no room: offered again when another block fills
        self._offered[seq.seq_id] = num_full
        if new:
            self.tier.touch(hashes)
            where = {h: i for i, h in enumerate(hashes[done:num_full], start=done)}
            self.stores += [(seq.block_table[where[h]], self.tier.slot[h]) for h in new]
            self.store_hashes += new

    def match_cpu(self, seq: Sequence, hits: list[int]) -> list[int]:
        """Hashes of the blocks past the GPU `hits` the tier holds (at least one whole block past
        them; all its full blocks touched first, as vLLM's get_num_new_matched_tokens does)."""
        if self.tier is None:
            return []
        full = len(seq) // self.block_size
        hashes = self._block_hashes(seq, full)
        self.tier.touch(hashes)
        if full - len(hits) < 1:
            return []
        return hashes[len(hits):len(hits) + self.tier.lookup(hashes[len(hits):full])]

    def load(self, seq: Sequence, hits: list[int], found: list[int]) -> list[tuple[int, int]]:
        """(host, device) pairs copying the tier's `found` blocks into `seq`'s blocks after its hits."""
        assert self.tier is not None
        self._offered[seq.seq_id] = len(hits) + len(found)  # vLLM does not store back what it loaded
        return [(self.tier.slot[h], seq.block_table[len(hits) + i]) for i, h in enumerate(found)]

    def take_stores(self) -> tuple[list[tuple[int, int]], list[int]]:
        """This step's copies to the tier, handed to whoever copies them (then `stores_done`)."""
        pairs, hashes = self.stores, self.store_hashes
        self.stores, self.store_hashes = [], []
        return pairs, hashes

    def stores_done(self, hashes: list[int], ok: bool = True) -> None:
        if self.tier is not None:
            (self.tier.stored if ok else self.tier.unstore)(hashes)

    def forget_uncomputed(self, seq: Sequence) -> None:
        """A failed step registered blocks it never filled: their hashes go (no one may hit them)."""
        done = self._registered.get(seq.seq_id, 0)
        first = seq.num_computed_tokens // self.block_size
        for i in range(first, done):
            self.pool.uncache(seq.block_table[i])
        if done > first:
            self._registered[seq.seq_id] = first

    def reset_prefix_cache(self) -> None:
        """Forget every cached block and restore the free queue's first order (vLLM's
        `reset_prefix_cache` forgets the hashes; the order too here, so a run starts as its
        prediction does). Only with no block in use."""
        if self.pool.num_used_blocks:
            raise RuntimeError("the prefix cache is reset only when no request holds blocks")
        self.pool = BlockPool(self.num_blocks)
        self._registered.clear()
        if self.tier is not None:  # and the CPU tier: what a warm-up stored is not part of the run
            self.tier = CpuTier(self.tier.num_blocks)
            self._offered.clear()

    # --- allocation ---------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, hits: list[int], num_tokens: int) -> bool:
        """Whether a waiting `seq` can hold `num_tokens` tokens, reusing the prefix `hits`."""
        need = self.pool.num_to_allocate(hits, self.blocks_needed(num_tokens) - len(hits))
        return need <= self.num_free_blocks

    def allocate(self, seq: Sequence, hits: list[int], num_tokens: int) -> None:
        """Admit `seq`: its block table becomes `hits` plus fresh blocks for `num_tokens` tokens."""
        assert not seq.block_table, f"{seq} already holds blocks"
        self.pool.touch(hits)
        seq.block_table = list(hits) + self.pool.allocate(self.blocks_needed(num_tokens) - len(hits))
        seq.num_computed_tokens = seq.num_cached_tokens = len(hits) * self.block_size
        self._registered[seq.seq_id] = len(hits)

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow a running `seq` to hold `num_new_tokens` more tokens; False (and no change) if full."""
        missing = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if missing > self.num_free_blocks:
            return False
        if missing > 0:
            seq.block_table.extend(self.pool.allocate(missing))
        return True

    def free(self, seq: Sequence) -> None:
        """Release every block of `seq` (device blocks, or CPU blocks if it is swapped out)."""
        if seq.status is SequenceStatus.SWAPPED:
            self._cpu_free.extend(reversed(seq.block_table))
        else:
            self.pool.free(reversed(seq.block_table))  # tail first, so a prefix outlives its suffix in the LRU
        self._registered.pop(seq.seq_id, None)
        seq.block_table = []

    def forget(self, seq: Sequence) -> None:
        """`seq` is done: what it offered the tier is no longer tracked (a preempted one keeps it)."""
        self._offered.pop(seq.seq_id, None)

    # --- swapping -----------------------------------------------------------------------------
    def _num_swapped_blocks(self, seq: Sequence) -> int:
        return -(-seq.num_computed_tokens // self.block_size)  # only blocks holding computed K/V travel

    def can_swap_out(self, seq: Sequence) -> bool:
        return self._num_swapped_blocks(seq) <= len(self._cpu_free)

    def swap_out(self, seq: Sequence) -> list[tuple[int, int]]:
        """Move `seq`'s computed blocks to the CPU pool; returns (device, cpu) block pairs to copy."""
        n = self._num_swapped_blocks(seq)
        pairs = [(device, self._cpu_free.pop()) for device in seq.block_table[:n]]
        self.pool.free(reversed(seq.block_table))
        self._registered.pop(seq.seq_id, None)  # back on the device in new blocks, registered again as computed
        seq.block_table = [cpu for _, cpu in pairs]
        return pairs

    def can_swap_in(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq.num_computed_tokens + num_new_tokens) <= self.num_free_blocks

    def swap_in(self, seq: Sequence) -> list[tuple[int, int]]:
        """Bring `seq` back to the device pool; returns (cpu, device) block pairs to copy."""
        pairs = list(zip(seq.block_table, self.pool.allocate(len(seq.block_table))))
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
        assert refs == self.pool.ref, "ref counts do not match the block tables"
        self.pool.check()
        assert sorted(cpu_used + self._cpu_free) == list(range(self.num_cpu_blocks)), "CPU pool blocks leaked"
