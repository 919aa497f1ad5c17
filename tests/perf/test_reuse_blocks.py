"""`predict`'s hashed block pool (kvplan.perf.reuse_blocks) on schedules worked out by hand from
vLLM 0.19.1's rules: v1/core/sched/scheduler.py (waiting requests look up their prefix when
`num_computed_tokens == 0`; no admission in a step that preempted), v1/core/kv_cache_manager.py
(`allocate_slots` registers full blocks up to computed + scheduled tokens when it schedules them,
so a request admitted later in the same step already hits them; hits stop one token short of the
prompt), v1/core/block_pool.py (head-first allocation evicts, tail-first free) and
v1/metrics/stats.py (`PrefixCacheStats`: preempted requests counted apart)."""
from __future__ import annotations

import pytest

from kvplan.perf.schedule import Engine, drive
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepShape
from kvplan.workload.request import Request
from kvplan.workload.sessions import Sessions


class OneSecond:
    """Every step takes 1 s, whatever it holds."""

    def step_s(self, shape: StepShape) -> float:
        return 1.0


def run(requests: list[Request], blocks: int, bs: int, fast: bool = True, max_num_seqs: int = 8) -> Engine:
    config = SchedulerConfig(num_gpu_blocks=blocks, block_size=bs, max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=2048)
    return drive(Engine(requests, config, OneSecond(), None), fast=fast)


def test_turns_hit_their_history_and_same_step_admissions_share_the_prefix() -> None:
    # prompts 52, 70, 88 (32 prefix + 20; + 8 reply + 10 each turn); block size 16
    sessions = Sessions(num_sessions=3, turns=3, shared_prefix_tokens=32, first_turn_tokens=20, turn_tokens=10,
                        output_tokens=8, think_time_s=0.5, think_distribution="constant")
    engine = run(sessions.requests(0, 1000), blocks=1000, bs=16)
    # turn 0: session 0 misses; sessions 1 and 2, admitted in the same step, hit the 2 prefix blocks
    # session 0 registered when it was scheduled. Turn 1: its history was 52 prompt + 7 computed reply
    # tokens = 3 full blocks (48); turn 2: 70 + 7 = 77 -> 4 blocks (64)
    assert [r.hit_tokens for r in engine.reqs] == [0, 48, 64, 32, 48, 64, 32, 48, 64]
    assert engine.reuse["queries_tokens"] == 3 * (52 + 70 + 88)
    assert engine.reuse["hit_tokens"] == 400
    assert engine.pool is not None and engine.pool.evicted_blocks == 0
    # a later turn is sent think_s after the turn before it got its last token
    turn0, turn1 = engine.reqs[0], engine.reqs[1]
    assert turn1.send_s == pytest.approx(turn0.last_s + 0.5)


def a_conversation_and_a_big_prompt() -> list[Request]:
    a0 = Request.of_ids(range(10, 18), 2, 0.0, session_id="a", index=0)
    a1 = Request(None, 13, 2, session_id="a", turn_index=1, think_s=10.0, index=1,
                 turn_ids=bytes(bytearray((30).to_bytes(4, "little") + (31).to_bytes(4, "little")
                                          + (32).to_bytes(4, "little"))))
    b = Request.of_ids(range(50, 74), 1, 5.0, index=2)
    return [a0, a1, b]


def test_a_prompt_between_turns_evicts_the_history_in_a_tight_pool() -> None:
    """bs 4. A0 (8 tokens, 2 out) takes blocks 0, 1 (registered), then 2; it ends at t=2 and frees
    2, 1, 0 to the queue's tail: 3 4 5 2 1 0. B (24 tokens, t=5) needs all six: blocks 1 and 0 lose
    A's hashes. A1 (t=12, 13 tokens) finds nothing and evicts four of B's blocks (0 1 2 5)."""
    engine = run(a_conversation_and_a_big_prompt(), blocks=6, bs=4)
    assert [r.hit_tokens for r in engine.reqs] == [0, 0, 0]
    assert engine.pool is not None and engine.pool.evicted_blocks == 2 + 4
    assert engine.reuse["queries_tokens"] == 8 + 13 + 24


def test_the_same_conversation_in_a_roomy_pool_hits_its_history() -> None:
    """A0 computed 8 prompt + 1 reply tokens: 2 full blocks, so A1 (13 tokens) hits 8."""
    engine = run(a_conversation_and_a_big_prompt(), blocks=20, bs=4)
    assert [r.hit_tokens for r in engine.reqs] == [0, 8, 0]
    assert engine.pool is not None and engine.pool.evicted_blocks == 0


def test_a_preempted_request_is_counted_apart_when_it_looks_up_again() -> None:
    """bs 4, 4 blocks. R1 (8 tokens, 8 out) takes 0, 1; R2 (4 tokens, 8 out) takes 2. Step 2: R1
    takes 3; R2 needs a block, none is free: R2 (the newest) is preempted, freeing 2 (hashed). R1's
    4th block (step 6, token 13) is block 2: R2's hash evicted. R1 ends; R2 comes back (5 tokens
    known): it takes blocks 2 (R1's 4th, not full: no hash) and 3 (R1's 3rd block, hashed): one
    more eviction; its 3rd block (token 9) is 1, R1's 2nd: a third. vLLM counts every lookup of the
    waiting R2: steps 3-5 find its own cached block (4 tokens), steps 6-8 nothing (R1 takes block 2
    in step 6 before R2 is tried), step 9 admits it: 7 preempted queries of 5 tokens, 12 hit."""
    r1 = Request.of_ids(range(100, 108), 8, 0.0, index=0)
    r2 = Request.of_ids(range(200, 204), 8, 0.0, index=1)
    engine = run([r1, r2], blocks=4, bs=4)
    assert engine.preemptions == 1
    assert engine.reuse == {"queries_tokens": 12, "hit_tokens": 0, "preempted_queries_tokens": 7 * 5,
                            "preempted_hit_tokens": 3 * 4}
    assert engine.pool is not None and engine.pool.evicted_blocks == 3


@pytest.mark.parametrize("rate", [None, 3.0])
def test_the_decode_shortcut_changes_nothing(rate: float | None) -> None:
    sessions = Sessions(num_sessions=12, turns=4, shared_prefix_tokens=40, first_turn_tokens=30, turn_tokens=12,
                        output_tokens=20, think_time_s=2.0, session_rate_per_s=rate)
    reqs = sessions.requests(3, 500)
    fast, slow = (run(reqs, blocks=60, bs=8, fast=f, max_num_seqs=6) for f in (True, False))
    assert fast.fast_steps > 0
    assert fast.reuse == slow.reuse and fast.pool.evicted_blocks == slow.pool.evicted_blocks  # type: ignore[union-attr]
    assert [(r.hit_tokens, r.first_s, r.last_s) for r in fast.reqs] == [(r.hit_tokens, r.first_s, r.last_s)
                                                                        for r in slow.reqs]
    fast.pool.check()  # type: ignore[union-attr]


def test_a_turn_without_the_turn_before_it_is_refused() -> None:
    orphan = Request(None, 10, 2, session_id="x", turn_index=1, index=0, turn_ids=b"\x05\x00\x00\x00")
    with pytest.raises(ValueError, match="no turn before it"):
        run([Request.of_ids(range(5, 13), 1, 0.0, index=1), orphan], blocks=10, bs=4)


def test_a_history_the_gpu_evicted_comes_back_from_the_cpu_tier() -> None:
    """The tight-pool case above with a 10-block CPU tier, 0.5 s a block to load. A0's two full
    blocks are stored when scheduled, B's six too (8 of 10: nothing leaves the tier). A1 (t=12)
    misses on the GPU; the tier holds A0's 2 blocks (its third, tokens 8-11, was never full):
    8 tokens to load, 1 s, so A1 rejoins at t=13 and computes its other 5 tokens in the step to 14
    (TTFT 2 s, where recomputing all 13 took 1). Its third block is stored then: 9 stored."""
    config = SchedulerConfig(num_gpu_blocks=6, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048,
                             cpu_tier_blocks=10, load_s_per_block=0.5)
    engine = drive(Engine(a_conversation_and_a_big_prompt(), config, OneSecond(), None))
    a1 = engine.reqs[1]
    assert (a1.hit_tokens, a1.cpu_hit_tokens) == (0, 8)
    assert (a1.send_s, a1.first_s) == (12.0, 14.0)
    assert engine.reuse["cpu_queries_tokens"] == 8 + 24 + 13 and engine.reuse["cpu_hit_tokens"] == 8
    assert engine.reuse["load_s"] == 1.0
    assert engine.tier is not None and (engine.tier.stored_blocks, engine.tier.evicted_blocks) == (9, 0)
    assert engine.pool is not None and engine.pool.evicted_blocks == 6


def test_a_tier_without_room_stores_nothing_and_keeps_what_it_had() -> None:
    """A 2-block tier: B's six blocks cannot be made room for, so none is stored (vLLM's
    prepare_store returns None) and A0's two stay: A1 still loads 8 tokens. Storing A1's third
    block then evicts the least recently used of those two (read and done with: evictable)."""
    config = SchedulerConfig(num_gpu_blocks=6, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048,
                             cpu_tier_blocks=2, load_s_per_block=0.5)
    engine = drive(Engine(a_conversation_and_a_big_prompt(), config, OneSecond(), None))
    assert engine.reqs[1].cpu_hit_tokens == 8
    assert engine.tier is not None and engine.tier.refused_blocks == 6 and engine.tier.evicted_blocks == 1


def test_the_tier_evicts_a_conversations_later_block_first() -> None:
    """A 7-block tier: A0's blocks are touched in reverse when stored, so its first block is the
    most recently used; B's six need one slot, and A0's second block goes. A1 loads 1 block
    (4 tokens, 0.5 s): it rejoins at 12.5 and samples at 13.5. Storing its blocks 1 and 2 then
    evicts B's two least recently used: 3 evictions in all."""
    config = SchedulerConfig(num_gpu_blocks=6, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048,
                             cpu_tier_blocks=7, load_s_per_block=0.5)
    engine = drive(Engine(a_conversation_and_a_big_prompt(), config, OneSecond(), None))
    a1 = engine.reqs[1]
    assert a1.cpu_hit_tokens == 4 and a1.first_s == 13.5
    assert engine.tier is not None and engine.tier.evicted_blocks == 3


def test_a_blocked_queue_head_is_counted_on_every_step_it_is_tried() -> None:
    """vLLM's get_computed_blocks records its stats on every lookup, and the scheduler looks the
    waiting head up on every step until it fits. bs 4, 4 blocks: R1 (12 tokens, 4 out) takes 3;
    R2 (8 tokens) needs 2 with 1 free: tried in steps 1-4 (R1 takes the 4th block in step 2 and
    ends in step 4), admitted in step 5: 5 lookups of 8 tokens, plus R1's 12."""
    r1 = Request.of_ids(range(100, 112), 4, 0.0, index=0)
    r2 = Request.of_ids(range(200, 208), 2, 0.0, index=1)
    for fast in (True, False):
        engine = run([r1, r2], blocks=4, bs=4, fast=fast)
        assert engine.reuse["queries_tokens"] == 12 + 5 * 8, fast
        assert engine.reqs[1].start_step == 4  # its first scheduled step (0-based): the fifth
