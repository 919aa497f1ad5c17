"""The simulated engine's blocks by id, hashed, when prompts carry token ids and prefix caching is
on: a mixin of `schedule.Engine` over `kvpool.BlockPool`, so a prompt hits what earlier requests
left in the cache (and misses what they evicted), not an upper bound computed before the run.

    admit    the waiting head looks its hashes up (all but its last token), touches the hits and
             takes new blocks for its first chunk; vLLM's free-capacity check counts hits still
             in the free queue (`get_num_blocks_to_allocate`)
    grow     a scheduled request's new blocks, and its full blocks registered as scheduled
             (`allocate_slots` caches up to computed + scheduled tokens)
    free     finished or preempted: its blocks, last first, to the free queue's tail
    turns    a conversation's next turn is released `think_s` after this turn's last token, its
             prompt the same token stream extended by the reply and its new message

Reply tokens are stand-ins unique to each request (negative ids: no prompt holds them), so a
reply's blocks hit only in its own conversation's later turns. Hit accounting follows vLLM's
`PrefixCacheStats`: queries and hits of new requests, those of preempted ones apart, and as in
vLLM every lookup counts: a queue head that cannot be admitted is counted again each step it is
tried (so `vllm:prefix_cache_queries` is predicted as vLLM exports it).
"""
from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from kvplan.kvpool.block_hash import TokenStream
from kvplan.kvpool.block_pool import BlockPool
from kvplan.kvpool.cpu_tier import CpuTier
from kvplan.perf.cpu_offload import CpuOffload
from kvplan.perf.request_state import RequestState
from kvplan.workload.request import Request

if TYPE_CHECKING:
    from kvplan.perf.scheduler_config import SchedulerConfig


def uses_hashed_pool(requests: list[Request], config: SchedulerConfig) -> bool:
    """Blocks by id when every prompt is known by token ids (or is a conversation's later turn)
    and V1's prefix caching is on; else the block counts alone. Hits marked beforehand
    (`prefix_cache.with_cached_tokens`, a warm-up's) keep the counts."""
    return (config.prefix_caching and config.chunked_prefill
            and all((r.packed_ids is not None or r.follows_turn) and not r.cached_tokens for r in requests))


def link_turns(requests: list[Request], states: list[RequestState], block_size: int) -> list[RequestState]:
    """Streams for first turns and single requests, each later turn chained to the one before;
    returns the states sent on their own (later turns wait for their release)."""
    last: dict[str, RequestState] = {}
    independent = []
    for req, r in zip(requests, states):
        if req.follows_turn:
            prev = last.get(req.session_id or "")
            if prev is None or prev.next_turn is not None:
                raise ValueError(f"turn {req.turn_index} of {req.session_id!r} has no turn before it in the list")
            prev.next_turn = r
        else:
            r.stream = TokenStream(block_size, req.prompt_token_ids or ())
            independent.append(r)
        if req.session_id is not None:
            last[req.session_id] = r
    return independent


class HashedBlocks(CpuOffload):
    """`schedule.Engine`'s pool when `uses_hashed_pool`: every attribute here is the engine's."""

    config: SchedulerConfig
    pool: BlockPool | None
    free: int
    waiting: deque[RequestState]
    later: list[tuple[float, int, RequestState]]  # released turns: (arrival, uid, state) heap
    reuse: dict[str, float]
    _lookup_memo: tuple[RequestState, int, int, list[int]] | None = None
    on_release: Callable[[RequestState], None] | None = None
    admitted_hit_tokens = 0  # GPU hits summed over admissions (re-admissions too): the engine's count
    stretch_takes: list[tuple[int, int]] = []  # noqa: RUF012 (replaced, never mutated in place)

    def setup_hashed(self, requests: list[Request], states: list[RequestState]) -> list[RequestState]:
        """The pool (and CPU tier), then `link_turns`: the states sent on their own."""
        bs = self.config.block_size
        self.pool = BlockPool(self.config.num_gpu_blocks)
        if self.config.cpu_tier_blocks:
            self.tier = CpuTier(self.config.cpu_tier_blocks)
            self.reuse.update(cpu_queries_tokens=0, cpu_hit_tokens=0, load_s=0)
        return link_turns(requests, states, bs)

    def reuse_figures(self) -> dict[str, float]:
        """The run's prefix-cache counters: vLLM's queries and hits (new and preempted requests
        apart), the cached blocks evicted; with a CPU tier, its lookups, hits, stores and evictions."""
        assert self.pool is not None
        out: dict[str, float] = {**self.reuse, "evicted_blocks": self.pool.evicted_blocks}
        if self.tier is not None:
            out.update(cpu_stored_blocks=self.tier.stored_blocks, cpu_evicted_blocks=self.tier.evicted_blocks)
        return out

    def _stand_ins(self, r: RequestState, upto: int) -> None:
        """The stream holds `r`'s tokens up to `upto` (its reply tokens as stand-ins)."""
        missing = upto - len(r.stream)
        if missing > 0:
            r.stream.extend([-(r.uid + 1)] * missing)

    def _lookup(self, r: RequestState) -> list[int]:
        """`r`'s prefix hits now (the last answer while the cache has not changed: a blocked queue
        head is asked again on every step)."""
        pool = self.pool
        assert pool is not None
        memo = self._lookup_memo
        if memo is not None and memo[0] is r and memo[1] == pool.version and memo[2] == r.known:
            return memo[3]
        self._stand_ins(r, r.known)
        usable = (r.known - 1) // self.config.block_size
        hits = pool.lookup(r.stream.hashes_to(usable), usable)
        self._lookup_memo = (r, pool.version, r.known, hits)
        return hits

    def admit_hashed(self, r: RequestState, budget: int) -> int:
        """Admit the waiting head with its prefix hits: the tokens scheduled, 0 if its first chunk
        does not fit, -1 if it now waits for a CPU tier's copy of more hits (`cpu_offload`)."""
        pool, bs = self.pool, self.config.block_size
        assert pool is not None
        if r.table:  # its copy from the CPU tier ended: no lookup, the rest of its prompt
            return self.grow_loaded(r, budget)
        hits = self._lookup(r)
        computed = len(hits) * bs
        self.count_lookup(r, computed)
        ext = self.cpu_hits(r, computed) if self.tier is not None else 0
        if ext:
            if not self.start_load(r, hits, computed, ext):
                return 0
            self._lookup_memo = None
            self._admitted(r, computed, ext)
            return -1
        n = min(r.known - computed, budget)
        new = -(-(computed + n) // bs) - len(hits)
        if pool.num_to_allocate(hits, new) > self.free:
            return 0
        self._lookup_memo = None
        pool.touch(hits)
        r.table = hits + pool.allocate(new)
        self.free = pool.num_free_blocks
        self._admitted(r, computed, 0)
        r.computed, r.blocks = computed, len(r.table)
        r.registered = len(hits)  # registered already (vLLM: num_cached_block = the hits)
        self._register(r, computed + n)
        return n

    def grow_loaded(self, r: RequestState, budget: int) -> int:
        """Schedule a loaded request's next chunk in the blocks it holds plus new ones (0: no room)."""
        assert self.pool is not None
        n = min(r.known - r.computed, budget)
        need = -(-(r.computed + n) // self.config.block_size) - len(r.table)
        if need > self.free:
            return 0
        if need > 0:
            r.table += self.pool.allocate(need)
            self.free = self.pool.num_free_blocks
        r.blocks = len(r.table)
        self._register(r, r.computed + n)
        return n

    def count_lookup(self, r: RequestState, hit_tokens: int, times: int = 1) -> None:
        """vLLM's prefix-cache counters (`get_computed_blocks`): every lookup of a waiting request is
        counted, a queue head that cannot be admitted again on every step it is tried; preempted
        requests apart. `times` lookups of `r`, `hit_tokens` found by them all."""
        key = "preempted_" if r.preempted else ""
        self.reuse[key + "queries_tokens"] += r.known * times
        self.reuse[key + "hit_tokens"] += hit_tokens

    def _admitted(self, r: RequestState, computed: int, ext: int) -> None:
        """An admission: the tier's counters (vLLM records them once the blocks are allocated) and
        the request's own hits at its first admission."""
        if self.tier is not None and r.known > computed:
            self.reuse["cpu_queries_tokens"] += r.known - computed
        self.admitted_hit_tokens += computed
        if r.hit_tokens < 0:
            r.hit_tokens, r.cpu_hit_tokens = computed, ext

    def head_blocked_hashed(self, budget: int) -> bool:
        """The waiting head's first chunk does not fit now; decodes only take blocks away and can
        only evict its hits, so it stays blocked until a request finishes."""
        pool, bs, r = self.pool, self.config.block_size, self.waiting[0]
        assert pool is not None
        hits = self._lookup(r)
        computed = len(hits) * bs
        n = min(r.known - computed, budget)
        return pool.num_to_allocate(hits, -(-(computed + n) // bs) - len(hits)) > self.free

    def grow_hashed(self, r: RequestState, need: int, upto: int) -> None:
        """`need` new blocks for a running request that will hold `upto` computed tokens."""
        pool = self.pool
        assert pool is not None
        if need:
            r.table += pool.allocate(need)
        self._register(r, upto)

    def stretch_blocks_hashed(self, running: list[RequestState], done: int) -> None:
        """The blocks `done` decode steps take, in the order stepping takes them (by step, then
        running order): which request holds which block decides the free queue's order later.
        Request r first needs a block in step len(table) * bs - computed + 1, then every bs steps."""
        bs, takes = self.config.block_size, list[tuple[int, int]]()
        for i, r in enumerate(running):
            takes.extend((step, i) for step in range(len(r.table) * bs - r.computed + 1, done + 1, bs))
        self.stretch_takes = []
        if takes:
            takes.sort()
            assert self.pool is not None
            for (step, i), block in zip(takes, self.pool.allocate(len(takes))):
                running[i].table.append(block)
                self.stretch_takes.append((step, block))

    def _register(self, r: RequestState, upto: int) -> None:
        """Register `r`'s blocks that are full once `upto` tokens are computed."""
        bs = self.config.block_size
        full = upto // bs
        registered = r.registered
        if full > registered:
            stream = r.stream
            if len(stream.ids) < full * bs:  # reply tokens not in the stream yet: the whole reply at once
                self._stand_ins(r, r.prompt + r.out)
            assert self.pool is not None
            self.pool.cache_blocks(r.table, stream.hashes_to(full), registered, full)
            r.registered = full
            if self.tier is not None:
                self.offload(r, full)

    def release_hashed(self, r: RequestState) -> None:
        """`r`'s blocks back to the free queue, last first (finished or preempted)."""
        assert self.pool is not None
        self.pool.free(reversed(r.table))
        r.table, r.registered = [], 0
        self.free = self.pool.num_free_blocks

    def release_next_turn(self, r: RequestState) -> None:
        """`r` (a turn) ended: its conversation's next turn is due `think_s` after its last token."""
        nxt = r.next_turn
        if nxt is None:
            return
        self._stand_ins(r, r.prompt + r.out)  # the whole reply goes back in the next prompt
        nxt.stream, r.stream = r.stream, None
        nxt.stream.extend(_unpack(nxt.turn_ids))
        nxt.arrival_s = r.last_s + nxt.think_s
        if self.on_release is not None:  # replicas behind a router: the router sends it (`router`)
            self.on_release(nxt)
        else:
            heapq.heappush(self.later, (nxt.arrival_s, nxt.uid, nxt))


def _unpack(packed: bytes | None) -> list[int]:
    ids = array("I")
    ids.frombytes(packed or b"")
    return ids.tolist()
