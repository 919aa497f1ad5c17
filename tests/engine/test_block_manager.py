"""BlockManager: unit checks plus a hypothesis state machine that allocates, grows, hits the
prefix cache, swaps, preempts, frees and aborts at random, checking ref counts and block
contents after every step."""
from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvplan.engine.block_manager import BlockManager
from kvplan.engine.sampling_params import SamplingParams
from kvplan.engine.sequence import Sequence, SequenceStatus

BS = 4


def make_seq(i: int, tokens: list[int]) -> Sequence:
    return Sequence(i, str(i), tokens, SamplingParams(), 0.0)


def test_on_demand_allocation_and_free() -> None:
    bm = BlockManager(8, BS)
    seq = make_seq(0, list(range(5)))
    assert bm.can_allocate(seq, [], 5)
    bm.allocate(seq, [], 5)
    assert len(seq.block_table) == 2 and bm.num_used_blocks == 2
    seq.num_computed_tokens = 5
    for n_tokens, blocks in ((6, 2), (8, 2), (9, 3)):  # a new block exactly when the last one fills
        assert bm.append_slots(seq, n_tokens - seq.num_computed_tokens)
        seq.num_computed_tokens = n_tokens
        assert len(seq.block_table) == blocks
    bm.free(seq)
    assert bm.num_free_blocks == 8 and not seq.block_table


def test_contiguous_reserves_max_model_len() -> None:
    bm = BlockManager(10, BS, reserve_blocks_per_seq=4)  # max_model_len 16
    a, b, c = (make_seq(i, [1, 2]) for i in range(3))
    bm.allocate(a, [], 2)
    bm.allocate(b, [], 2)
    assert len(a.block_table) == 4 and bm.num_free_blocks == 2
    assert not bm.can_allocate(c, [], 2)  # 2 free blocks < one reservation of 4
    a.num_computed_tokens = 2
    assert bm.append_slots(a, 13) and len(a.block_table) == 4  # growth stays inside the reservation


def test_prefix_cache_hit_and_lru_eviction() -> None:
    bm = BlockManager(4, BS, enable_prefix_caching=True)
    a = make_seq(0, list(range(9)))
    bm.allocate(a, bm.match_prefix(a), 9)
    a.num_computed_tokens = 9
    bm.cache_full_blocks(a)
    bm.free(a)
    assert bm.num_cached_blocks == 2 and bm.num_free_blocks == 4
    b = make_seq(1, list(range(8)) + [99, 98])
    hits = bm.match_prefix(b)
    assert len(hits) == 2
    bm.allocate(b, hits, 10)
    assert b.num_computed_tokens == 8 and b.num_cached_tokens == 8
    c = make_seq(2, list(range(8)))  # entirely cached: the last block is recomputed for logits
    assert len(bm.match_prefix(c)) == 1
    bm.free(b)
    d = make_seq(3, [7] * 16)  # needs all 4 blocks: evicts the cached ones
    bm.allocate(d, bm.match_prefix(d), 16)
    assert bm.num_cached_blocks == 0 and bm.match_prefix(c) == []
    bm.check_invariants([d])


def test_eviction_takes_the_least_recently_freed_cached_block() -> None:
    """vLLM's free queue: a cached block freed earlier is evicted before one freed later, so the
    prompt used most recently keeps its prefix."""
    bm = BlockManager(3, BS, enable_prefix_caching=True)
    for i, first in enumerate((0, 10)):  # A = 0..4 then B = 10..14: one full block each is cached
        seq = make_seq(i, list(range(first, first + 5)))
        bm.allocate(seq, bm.match_prefix(seq), 5)
        seq.num_computed_tokens = 5
        bm.cache_full_blocks(seq)
        bm.free(seq)
    assert bm.num_cached_blocks == 2
    c = make_seq(2, [7] * 8)  # two new blocks: the one uncached free block, then one eviction
    bm.allocate(c, bm.match_prefix(c), 8)
    assert bm.match_prefix(make_seq(3, list(range(5)))) == []  # A, freed first, was evicted
    assert len(bm.match_prefix(make_seq(4, list(range(10, 15))))) == 1  # B kept


def test_one_free_queue_evicts_a_cached_head_before_a_never_cached_block() -> None:
    """vLLM 0.19.1 (v1/core/block_pool.py `get_new_blocks`): new blocks are the free queue's head
    whatever they hold. A = 5 tokens takes blocks 0, 1 (block 0 full and cached), B = 3 tokens
    takes block 2; freeing A (tail first) then B leaves the queue 1, 0, 2, so C's two blocks are
    1 and 0 and A's prefix is evicted though block 2 never held anything."""
    bm = BlockManager(3, BS, enable_prefix_caching=True)
    a, b = make_seq(0, list(range(5))), make_seq(1, [50, 51, 52])
    for seq in (a, b):
        bm.allocate(seq, bm.match_prefix(seq), len(seq))
        seq.num_computed_tokens = len(seq)
        bm.cache_full_blocks(seq)
    bm.free(a)
    bm.free(b)
    c = make_seq(2, [7] * 8)
    bm.allocate(c, bm.match_prefix(c), 8)
    assert c.block_table == [1, 0]
    assert bm.match_prefix(make_seq(3, list(range(5)))) == [] and bm.num_evicted_blocks == 1


class BlockManagerMachine(RuleBasedStateMachine):
    """Random lifecycles over a small pool. `shadow` holds, per device block slot, the token id
    whose K/V would sit there; a running sequence must always find its own tokens in its blocks."""

    reserve: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.bm = BlockManager(
            24, BS, enable_prefix_caching=True, reserve_blocks_per_seq=self.reserve, num_cpu_blocks=12
        )
        self.seqs: list[Sequence] = []
        self.next_id = 0
        self.shadow = [[None] * BS for _ in range(24)]
        self.cpu_shadow = [[None] * BS for _ in range(12)]

    def live(self, *status: SequenceStatus) -> list[Sequence]:
        return [s for s in self.seqs if s.status in status]

    def admit(self, seq: Sequence, budget: int) -> None:
        hits = self.bm.match_prefix(seq)
        cached = len(hits) * BS
        n = min(len(seq) - cached, budget)
        if self.bm.can_allocate(seq, hits, cached + n):
            self.bm.allocate(seq, hits, cached + n)
            seq.status = SequenceStatus.RUNNING
            self.compute(seq, n)

    def compute(self, seq: Sequence, n: int) -> None:
        for p in range(seq.num_computed_tokens, seq.num_computed_tokens + n):
            self.shadow[seq.block_table[p // BS]][p % BS] = seq.token_ids[p]
        seq.num_computed_tokens += n
        self.bm.cache_full_blocks(seq)
        if seq.num_computed_tokens == len(seq):
            seq.append_token(seq.token_ids[-1] % 3, 0.0)

    @rule(prefix=st.sampled_from([[], [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8], [9] * 12]),
          tail=st.lists(st.integers(0, 3), min_size=1, max_size=20), budget=st.integers(1, 24))
    def add(self, prefix: list[int], tail: list[int], budget: int) -> None:
        seq = Sequence(self.next_id, str(self.next_id), prefix + tail, SamplingParams(), 0.0)
        self.next_id += 1
        self.seqs.append(seq)
        self.admit(seq, budget)

    @precondition(lambda self: self.live(SequenceStatus.WAITING))
    @rule(data=st.data(), budget=st.integers(1, 24))
    def readmit(self, data, budget: int) -> None:
        self.admit(data.draw(st.sampled_from(self.live(SequenceStatus.WAITING))), budget)

    @precondition(lambda self: self.live(SequenceStatus.RUNNING))
    @rule(data=st.data(), budget=st.integers(1, 9))
    def step(self, data, budget: int) -> None:
        seq = data.draw(st.sampled_from(self.live(SequenceStatus.RUNNING)))
        n = min(len(seq) - seq.num_computed_tokens, budget)
        if len(seq) < 40 and self.bm.append_slots(seq, n):
            self.compute(seq, n)

    @precondition(lambda self: self.live(SequenceStatus.RUNNING))
    @rule(data=st.data())
    def preempt_recompute(self, data) -> None:
        seq = data.draw(st.sampled_from(self.live(SequenceStatus.RUNNING)))
        self.bm.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING

    @precondition(lambda self: self.live(SequenceStatus.RUNNING))
    @rule(data=st.data())
    def swap_out(self, data) -> None:
        seq = data.draw(st.sampled_from(self.live(SequenceStatus.RUNNING)))
        if self.bm.can_swap_out(seq):
            for dev, cpu in self.bm.swap_out(seq):
                self.cpu_shadow[cpu] = list(self.shadow[dev])
            seq.status = SequenceStatus.SWAPPED

    @precondition(lambda self: self.live(SequenceStatus.SWAPPED))
    @rule(data=st.data())
    def swap_in(self, data) -> None:
        seq = data.draw(st.sampled_from(self.live(SequenceStatus.SWAPPED)))
        if self.bm.can_swap_in(seq, 1):
            for cpu, dev in self.bm.swap_in(seq):
                self.shadow[dev] = list(self.cpu_shadow[cpu])
            seq.status = SequenceStatus.RUNNING
            assert self.bm.append_slots(seq, 1)

    @precondition(lambda self: any(s.status is not SequenceStatus.FINISHED for s in self.seqs))
    @rule(data=st.data())
    def finish_or_abort(self, data) -> None:
        seq = data.draw(st.sampled_from([s for s in self.seqs if s.status is not SequenceStatus.FINISHED]))
        self.bm.free(seq)
        seq.status = SequenceStatus.FINISHED

    @invariant()
    def consistent(self) -> None:
        self.bm.check_invariants(self.live(SequenceStatus.RUNNING, SequenceStatus.SWAPPED))
        assert self.bm.num_used_blocks + self.bm.num_free_blocks == self.bm.num_blocks
        for seq in self.live(SequenceStatus.RUNNING, SequenceStatus.SWAPPED):
            shadow = self.shadow if seq.status is SequenceStatus.RUNNING else self.cpu_shadow
            held = [shadow[seq.block_table[p // BS]][p % BS] for p in range(seq.num_computed_tokens)]
            assert held == seq.token_ids[:seq.num_computed_tokens], f"{seq} lost its K/V"
            if self.reserve and seq.status is SequenceStatus.RUNNING:
                assert len(seq.block_table) >= self.reserve

    def teardown(self) -> None:
        for seq in self.seqs:
            if seq.status is not SequenceStatus.FINISHED:
                self.bm.free(seq)
                seq.status = SequenceStatus.FINISHED
        self.bm.check_invariants([])
        assert self.bm.num_free_blocks == self.bm.num_blocks  # every block free or cached
        assert not any(self.bm.pool.ref)
        assert self.bm.num_free_cpu_blocks == self.bm.num_cpu_blocks


class ContiguousMachine(BlockManagerMachine):
    reserve = 10  # max_model_len 40 at block size 4


_settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestBlockManagerMachine = BlockManagerMachine.TestCase
TestBlockManagerMachine.settings = _settings
TestContiguousMachine = ContiguousMachine.TestCase
TestContiguousMachine.settings = _settings
