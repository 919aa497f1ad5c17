"""Scheduler: token budget, chunked prefill, max_num_seqs, FCFS admission, preemption order."""
from __future__ import annotations

from kvplan.engine.block_manager import BlockManager
from kvplan.engine.sampling_params import SamplingParams
from kvplan.engine.scheduler import Scheduler
from kvplan.engine.sequence import Sequence, SequenceStatus


def seq(i: int, n: int) -> Sequence:
    return Sequence(i, str(i), [5] * n, SamplingParams(), float(i))


def advance(sched: Scheduler, batch) -> None:
    """What the engine does after a forward: count computed tokens, append a token when sampled."""
    for s, n in zip(batch.seqs, batch.num_new_tokens):
        s.num_computed_tokens += n
        if s.num_computed_tokens == len(s):
            s.append_token(7, 0.0)


def test_chunked_prefill_under_token_budget() -> None:
    sched = Scheduler(BlockManager(64, 16), max_num_seqs=8, max_num_batched_tokens=32)
    a, b = seq(0, 100), seq(1, 10)
    sched.add(a)
    sched.add(b)
    chunks = []
    while a.num_output_tokens == 0:
        batch = sched.schedule()
        assert batch.num_tokens <= 32
        chunks.append(dict(zip((s.request_id for s in batch.seqs), batch.num_new_tokens)))
        advance(sched, batch)
    assert chunks[0] == {"0": 32}  # b waits: the budget is spent
    assert chunks[3] == {"0": 4, "1": 10}  # a's last chunk and b's whole prompt share a step
    batch = sched.schedule()
    assert batch.num_new_tokens == (1, 1)  # both decode now


def test_max_num_seqs_and_fcfs_head_of_line() -> None:
    sched = Scheduler(BlockManager(8, 16), max_num_seqs=2, max_num_batched_tokens=1000)
    big, small, small2 = seq(0, 16 * 7), seq(1, 4), seq(2, 4)
    filler = seq(9, 20)
    sched.add(filler)
    batch = sched.schedule()
    advance(sched, batch)  # filler holds 2 blocks
    for s in (big, small, small2):
        sched.add(s)
    batch = sched.schedule()
    # big needs 7 blocks but only 6 are free: it waits, and nobody behind it jumps the queue
    assert [s.request_id for s in batch.seqs] == ["9"]
    sched.finish(filler, "length")
    batch = sched.schedule()
    assert [s.request_id for s in batch.seqs] == ["0", "1"]  # max_num_seqs=2 leaves small2 waiting
    assert [s.request_id for s in sched.waiting] == ["2"]


def test_preemption_takes_latest_arrival_and_requeues_first() -> None:
    sched = Scheduler(BlockManager(3, 4), max_num_seqs=8, max_num_batched_tokens=100)
    seqs = [seq(i, 4) for i in range(3)]  # each fills one block; the next token needs a second
    for s in seqs:
        sched.add(s)
    advance(sched, sched.schedule())  # all 3 blocks used
    batch = sched.schedule()  # 0 preempts 2 for its block; 1 then finds itself the newest and yields
    assert [s.request_id for s in batch.seqs] == ["0"]
    assert batch.num_preempted == 2
    assert [s.request_id for s in sched.waiting] == ["1", "2"]  # arrival order kept
    assert all(s.status is SequenceStatus.WAITING and s.num_computed_tokens == 0 for s in seqs[1:])


def test_swap_preemption_and_swap_in() -> None:
    bm = BlockManager(3, 4, num_cpu_blocks=8)
    sched = Scheduler(bm, max_num_seqs=8, max_num_batched_tokens=100, enable_swap=True)
    seqs = [seq(i, 4) for i in range(3)]
    for s in seqs:
        sched.add(s)
    advance(sched, sched.schedule())
    batch = sched.schedule()
    assert batch.num_swapped_out == 2 and len(batch.blocks_to_swap_out) == 2
    assert [s.status for s in seqs] == [SequenceStatus.RUNNING, SequenceStatus.SWAPPED, SequenceStatus.SWAPPED]
    advance(sched, batch)
    sched.finish(seqs[0], "length")
    batch = sched.schedule()  # 2 blocks free: room for seq 1 (its block + one to grow), not for seq 2
    assert batch.num_swapped_in == 1 and len(batch.blocks_to_swap_in) == 1
    assert [s.status for s in seqs[1:]] == [SequenceStatus.RUNNING, SequenceStatus.SWAPPED]
    assert seqs[1].num_computed_tokens == 4 and batch.num_new_tokens == (1,)  # no recompute
    bm.check_invariants(sched.running + list(sched.swapped))


def test_computed_prompt_tokens_leave_out_hits_and_decodes_and_count_a_recompute_again() -> None:
    """100 prompt tokens in chunks of 32: 32 + 32 + 32 + 4 computed, decodes add none. A second
    request with the same first 64 tokens hits 4 cached blocks and computes only its other 36. A
    request preempted by recompute computes its prompt again (vLLM's recompute preemption)."""
    sched = Scheduler(BlockManager(64, 16, enable_prefix_caching=True), max_num_seqs=8, max_num_batched_tokens=32)
    a = Sequence(0, "a", list(range(100)), SamplingParams(), 0.0)
    sched.add(a)
    counted = []
    while a.num_output_tokens < 3:
        batch = sched.schedule()
        counted.append(batch.num_computed_prompt_tokens)
        advance(sched, batch)
    assert counted == [32, 32, 32, 4, 0, 0]
    b = Sequence(1, "b", list(range(64)) + [500 + i for i in range(36)], SamplingParams(), 1.0)
    sched.add(b)
    total = 0
    while b.num_output_tokens == 0:
        batch = sched.schedule()
        total += batch.num_computed_prompt_tokens
        advance(sched, batch)
    assert total == 36 and b.num_cached_tokens == 64

    small = Scheduler(BlockManager(3, 4), max_num_seqs=8, max_num_batched_tokens=100)
    seqs = [Sequence(i, str(i), [5 + i] * 4, SamplingParams(), float(i)) for i in range(3)]
    for s in seqs:
        small.add(s)
    first = small.schedule()
    assert first.num_computed_prompt_tokens == 12
    advance(small, first)
    second = small.schedule()  # 0 decodes; 1 and 2 are preempted by recompute
    assert second.num_preempted == 2 and second.num_computed_prompt_tokens == 0
    advance(small, second)
    small.finish(seqs[0], "length")
    third = small.schedule()  # 1 comes back (prompt + its sampled token: 5 tokens, 2 blocks; 2 waits)
    assert third.num_new_tokens == (5,) and third.num_computed_prompt_tokens == 4  # its prompt again, not the reply
