"""`Scheduler`: continuous batching with chunked prefill, FCFS, and preemption.

Every step builds one `ScheduledBatch` under two limits: `max_num_seqs` running sequences and
`max_num_batched_tokens` tokens (prefill chunks and decodes share that budget, as in vLLM V1).
Running sequences go first, in arrival order; when the pool runs out, the latest arrival is
preempted (swapped to the CPU pool when it has room, else dropped and recomputed later).
Swapped and then waiting sequences are admitted only in steps without preemption, head of the
queue first and never skipped, so no request starves.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvplan.engine.block_manager import BlockManager
from kvplan.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class ScheduledBatch:
    """What the runner computes this step: `num_new_tokens[i]` tokens of `seqs[i]`, starting at
    its `num_computed_tokens`, after copying the swap pairs (swap-outs first)."""

    seqs: tuple[Sequence, ...]
    num_new_tokens: tuple[int, ...]
    blocks_to_swap_out: tuple[tuple[int, int], ...] = ()  # (device block, cpu block)
    blocks_to_swap_in: tuple[tuple[int, int], ...] = ()  # (cpu block, device block)
    num_preempted: int = 0
    num_swapped_out: int = 0
    num_swapped_in: int = 0
    num_prefix_hit_tokens: int = 0
    blocks_to_load: tuple[tuple[int, int], ...] = ()  # (tier host block, device block): copied before the step
    num_cpu_hit_tokens: int = 0  # prompt tokens the CPU tier served this step
    # prompt tokens computed this step: those neither cache served (again after a recompute preemption)
    num_computed_prompt_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)


@dataclass
class _Step:
    """The batch being built in one `schedule()` call and the token budget it has left."""

    budget: int
    seqs: list[Sequence] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)
    swap_in: list[tuple[int, int]] = field(default_factory=list)
    preempted: int = 0
    swapped_out: int = 0
    swapped_in: int = 0
    hit_tokens: int = 0
    load: list[tuple[int, int]] = field(default_factory=list)
    cpu_hit_tokens: int = 0
    computed_prompt_tokens: int = 0

    def add(self, seq: Sequence, num_tokens: int) -> None:
        """`num_tokens` of `seq` from its `num_computed_tokens` on (a cache hit already counted there)."""
        self.seqs.append(seq)
        self.counts.append(num_tokens)
        self.budget -= num_tokens
        self.computed_prompt_tokens += max(0, min(num_tokens, seq.num_prompt_tokens - seq.num_computed_tokens))

    def batch(self) -> ScheduledBatch:
        return ScheduledBatch(tuple(self.seqs), tuple(self.counts), tuple(self.swap_out), tuple(self.swap_in),
                              self.preempted, self.swapped_out, self.swapped_in, self.hit_tokens, tuple(self.load),
                              self.cpu_hit_tokens, self.computed_prompt_tokens)


class Scheduler:
    def __init__(self, block_manager: BlockManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_swap: bool = False) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_swap = enable_swap
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # kept in arrival (seq_id) order
        self.swapped: deque[Sequence] = deque()

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def _preempt(self, seq: Sequence, swap_out: list[tuple[int, int]]) -> bool:
        """Preempt `seq` (already removed from `running`); True if it was swapped."""
        seq.num_preemptions += 1
        if self.enable_swap and self.block_manager.can_swap_out(seq):
            swap_out.extend(self.block_manager.swap_out(seq))
            seq.status = SequenceStatus.SWAPPED
            self.swapped.appendleft(seq)
            return True
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)  # victims leave latest-first, so the queue stays in arrival order
        return False

    def schedule(self) -> ScheduledBatch:
        step = _Step(self.max_num_batched_tokens)
        self._schedule_running(step)
        if not step.preempted:  # admitting while preempting would only evict the newcomers again
            self._admit_swapped(step)
            self._admit_waiting(step)
            if step.swapped_in:
                self.running.sort(key=lambda s: s.seq_id)
        return step.batch()

    def _schedule_running(self, step: _Step) -> None:
        """Running sequences, oldest first; the newest running one is the preemption victim."""
        i = 0
        while i < len(self.running) and step.budget > 0:
            seq = self.running[i]
            n = min(len(seq) - seq.num_computed_tokens, step.budget)
            while not self.block_manager.append_slots(seq, n):
                victim = self.running.pop()
                step.preempted += 1
                step.swapped_out += self._preempt(victim, step.swap_out)
                if victim is seq:
                    break
            else:
                self.block_manager.cache_full_blocks(seq, seq.num_computed_tokens + n)
                step.add(seq, n)
                i += 1

    def _admit_swapped(self, step: _Step) -> None:
        """Swapped sequences come back before any waiting one, head of the queue first."""
        bm = self.block_manager
        while self.swapped and step.budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.swapped[0]
            n = min(len(seq) - seq.num_computed_tokens, step.budget)
            if not bm.can_swap_in(seq, n):
                break
            self.swapped.popleft()
            step.swap_in.extend(bm.swap_in(seq))
            bm.append_slots(seq, n)
            bm.cache_full_blocks(seq, seq.num_computed_tokens + n)
            step.swapped_in += 1
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            step.add(seq, n)

    def _admit_waiting(self, step: _Step) -> None:
        """Waiting sequences, head first and never skipped (so none starves), reusing cached prefix
        blocks, then the CPU tier's blocks past them (copied in before the step: the engine loads
        synchronously, where vLLM holds the request until its copy ends)."""
        bm = self.block_manager
        while not self.swapped and self.waiting and step.budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            hits = bm.match_prefix(seq)
            found = bm.match_cpu(seq, hits)
            cached = min((len(hits) + len(found)) * bm.block_size, len(seq) - 1)  # a full hit computes its last token
            n = min(len(seq) - cached, step.budget)
            if not bm.can_allocate(seq, hits, cached + n):
                break
            self.waiting.popleft()
            bm.allocate(seq, hits, cached + n)
            if found:
                step.load += bm.load(seq, hits, found)
                step.cpu_hit_tokens += cached - len(hits) * bm.block_size
                seq.num_computed_tokens = seq.num_cached_tokens = cached
            bm.cache_full_blocks(seq, cached + n)
            step.hit_tokens += len(hits) * bm.block_size
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            step.add(seq, n)

    def finish(self, seq: Sequence, reason: str) -> None:
        """Remove `seq` from whichever queue holds it and release its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.SWAPPED:
            self.swapped.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        self.block_manager.forget(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
