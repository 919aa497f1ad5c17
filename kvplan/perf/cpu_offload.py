"""A CPU tier behind the hashed block pool, as vLLM's OffloadingConnector runs it (--kv-offloading-size,
backend native; distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py, 0.19.1): a mixin of
`schedule.Engine` over `kvpool.CpuTier`.

    store    each step, a scheduled request's newly full blocks are offered to the tier (write-through:
             `_get_reqs_to_store`); they are readable from the end of that step
    lookup   a waiting request that found its GPU hits looks the rest up in the tier
             (`get_num_new_matched_tokens`, after touching all its full blocks); a hit of at least one
             block is loaded: the request takes GPU blocks for its hits and waits, outside the token
             budget, while the copy runs (WAITING_FOR_REMOTE_KVS); the scheduler moves on to the next
    load     the copy starts with the step and takes `load_s_per_block` a block; the request rejoins
             the head of the queue at the first step boundary after it ends, its loaded blocks cached
             on the GPU, and computes the rest (a full-prompt hit still computes its last token)

vLLM counts the tier's lookups apart: `vllm:external_prefix_cache_queries` (prompt tokens past the
GPU hits) and `..._hits`. Approximations: the copy does not contend with stores for the link, a
store refused for lack of room is offered again only when another block fills, and two requests
loading the same block both copy it (vLLM delays the second).
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from kvplan.kvpool.block_pool import BlockPool
from kvplan.kvpool.cpu_tier import CpuTier
from kvplan.perf.request_state import RequestState

if TYPE_CHECKING:
    from kvplan.perf.scheduler_config import SchedulerConfig


class CpuOffload:
    """`schedule.Engine`'s CPU tier when `config.cpu_tier_blocks` > 0: every attribute is the engine's."""

    config: SchedulerConfig
    pool: BlockPool | None
    tier: CpuTier | None = None
    clock: float
    free: int
    waiting: deque[RequestState]
    loading: list[RequestState]
    reuse: dict[str, float]
    stores: list[int]  # hashes stored this step: readable once it ends

    if TYPE_CHECKING:
        def _register(self, r: RequestState, upto: int) -> None: ...

    def cpu_hits(self, r: RequestState, computed: int) -> int:
        """Tokens past `computed` (the GPU hits) the tier holds for `r`: whole blocks, at least one."""
        tier, bs = self.tier, self.config.block_size
        assert tier is not None
        full = r.known // bs
        hashes = r.stream.block_hashes(full)
        tier.touch(hashes)
        if full * bs - computed < bs:
            return 0
        start = computed // bs
        return bs * (start + tier.lookup(hashes[start:full])) - computed

    def start_load(self, r: RequestState, hits: list[int], computed: int, ext: int) -> bool:
        """Take GPU blocks for `r`'s GPU and CPU hits and start copying the CPU ones; False if the
        blocks are not free."""
        pool, tier, bs = self.pool, self.tier, self.config.block_size
        assert pool is not None and tier is not None
        new = -(-(computed + ext) // bs) - len(hits)
        if pool.num_to_allocate(hits, new) > self.free:
            return False
        pool.touch(hits)
        r.table = hits + pool.allocate(new)
        self.free = pool.num_free_blocks
        first, last = computed // bs, (computed + ext) // bs
        hashes = r.stream.block_hashes(last)[first:]
        tier.read(hashes)
        r.loading = (float(self.clock) + len(hashes) * self.config.load_s_per_block, hashes)
        r.computed, r.blocks, r.registered = computed + ext, len(r.table), len(hits)
        self.reuse["cpu_hit_tokens"] += ext
        self.reuse["load_s"] += float(r.loading[0] - self.clock)
        self.loading.append(r)
        return True

    def finish_loads(self) -> None:
        """Requests whose copies ended by now rejoin the head of the queue, loaded blocks cached."""
        done = [r for r in self.loading if r.loading is not None and r.loading[0] <= self.clock]
        if not done:
            return
        tier = self.tier
        assert tier is not None
        for r in reversed(done):
            assert r.loading is not None
            tier.read_done(r.loading[1])
            r.loading = None
            self._register(r, r.computed)
            r.stored = r.computed // self.config.block_size  # vLLM does not store back what it loaded
            if r.computed == r.known:
                r.computed -= 1  # the last token is computed again for its logits
            self.waiting.appendleft(r)
        self.loading = [r for r in self.loading if r.loading is not None]

    def next_load_s(self) -> float:
        return min((r.loading[0] for r in self.loading if r.loading is not None), default=float("inf"))

    def offload(self, r: RequestState, full: int) -> None:
        """Offer `r`'s first `full` blocks (those past what it already offered) to the tier."""
        tier = self.tier
        if tier is None or full <= r.stored:
            return
        hashes = r.stream.block_hashes(full)
        new = tier.store(hashes[r.stored:full])
        if new is None:
            return  # no room: offered again when another block fills
        r.stored = full
        if new:
            tier.touch(hashes)
            self.stores.extend(new)

    def stores_done(self) -> None:
        if self.stores:
            assert self.tier is not None
            self.tier.stored(self.stores)
            self.stores = []
