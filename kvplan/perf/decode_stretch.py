"""The scheduler's pure-decode shortcut: a stretch of steps in which every running request only
decodes (nothing to admit, no arrival due, or a queue that cannot move until a request finishes) is
timed with one vectorized call of the step cost and applied at once, with the same clock, ITL
samples, block counts and finishes as stepping one at a time. A mixin of `schedule.Engine`, whose
state it reads and advances; `lockstep` runs the stretches data-parallel replicas share."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from kvplan.kvpool.block_pool import BlockPool
from kvplan.kvpool.cpu_tier import CpuTier
from kvplan.perf.request_state import RequestState
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepCost, StepShape


def stretch_clocks(costs: np.ndarray, clock: float, due: float) -> np.ndarray:
    """The end times of a stretch's steps (`costs` each, from `clock`), up to the one running when
    `due` comes. Accumulated left to right (cumsum is sequential: (clock + dt0) + dt1 + ...), so each
    value is the one the step-by-step loop would produce, bit for bit."""
    costs[0] += clock
    clocks = costs.cumsum()
    return clocks[:min(len(clocks), 1 + int(clocks.searchsorted(due)))]


class DecodeStretches:
    """Decode stretches of `schedule.Engine`: every attribute used here is the engine's (its
    requests, block pool, clock and recorded columns)."""

    _stretch_memo: tuple[int, int, np.ndarray] | None = None  # (n, ctx0, costs) of the last stretch timed ahead
    # the engine's state this mixin reads and advances (schedule.Engine sets each in __init__)
    config: SchedulerConfig
    cost: StepCost
    record: bool
    pending: deque[RequestState]
    waiting: deque[RequestState]
    held: deque[RequestState]
    running: list[RequestState]
    cols: list[list[float]]
    itl: list[float]
    clock: float
    free: int
    queue: deque[list]  # the free queue's runs while a preempted request's blocks are cached in it
    loading: list[RequestState]
    tier: CpuTier | None
    pool: BlockPool | None  # the hashed pool (`reuse_blocks`), or None: block counts alone
    cached_runs: int
    steps: int
    in_flight: int
    peak: int
    max_running: int
    fast_steps: int
    cap: int
    horizon_s: float
    full_s: float
    stretch_takes: list[tuple[int, int]]  # the last stretch's new blocks: (step from 1, block)

    if TYPE_CHECKING:
        def next_event_s(self) -> float: ...

        def _hand_over(self, r: RequestState, send_s: float, send_step: int) -> None: ...

        def _finish(self, r: RequestState) -> None: ...

        def _evict(self, n: int) -> None: ...

        def pop_due(self, by_s: float) -> RequestState | None: ...

        def next_due_s(self) -> float: ...

        def grow_hashed(self, r: RequestState, need: int, upto: int) -> None: ...

        def head_blocked_hashed(self, budget: int) -> bool: ...

        def stretch_blocks_hashed(self, running: list[RequestState], done: int) -> None: ...

        def count_lookup(self, r: RequestState, hit_tokens: int, times: int = 1) -> None: ...

        def _lookup(self, r: RequestState) -> list[int]: ...

    def fast_decode(self) -> bool:
        """Run a stretch of pure-decode steps (nothing waiting and no arrival due, or a waiting queue
        that cannot move until a request finishes; the blocks they need free), up to and including
        the step where the first requests finish, without the
        per-request scheduling loop; False if none applies. The steps, clock, ITL samples, block
        counts and finishes are those the step-by-step path produces."""
        steps, ctx0 = self.stretch()
        if steps < 2:
            return False
        # a blocked queue stays blocked however many requests join it: run through their arrivals
        due = self.horizon_s if self.waiting else self.next_event_s()
        done, clocks = self._time_stretch(len(self.running), steps, ctx0, due) if self.clock < due else (0, None)
        head_hits = self._lookup(self.waiting[0]) if self.waiting and self.pool is not None and done else None
        n = len(self.running)  # before the stretch's last step finishes some
        if self.waiting and done > 1 and clocks is not None:
            self._send_during(clocks[:done - 1])
        elif done > 1 and clocks is not None and self.in_flight >= self.cap and self.next_due_s() <= clocks[done - 2]:
            self.full_s = float(clocks[done - 2])  # due requests found no client slot at the stretch's boundaries
        self.run_stretch(done, steps, clocks)
        if head_hits is not None:
            self._count_blocked_head(done, head_hits, n)
        return True

    def stretch(self) -> tuple[int, int]:
        """(steps, cached tokens) of the pure-decode stretch the running requests can run now, up to
        the first finish and within the free blocks; (0, 0) if they cannot."""
        running = self.running
        n = len(running)
        if not n or n > self.config.max_num_batched_tokens or (self.waiting and not self._head_blocked(n)):
            return 0, 0
        if self.tier is not None:  # its stores and touches order the CPU tier's LRU step by step
            return 0, 0
        if self.held and not self.waiting:  # they join after one step: step it alone
            return 0, 0
        left, ctx0 = 1 << 62, 0
        for r in reversed(running):  # a request still in prefill was admitted last: fail fast
            if r.known - r.computed != 1 or not r.generated:
                return 0, 0
            if r.out - r.generated < left:
                left = r.out - r.generated
            ctx0 += r.computed
        steps = left  # the last one finishes the shortest requests
        # blocks: a request grows by at most steps // bs + 1 of them; when that may not fit, stop
        # before the step that would have to preempt
        if n * (steps // self.config.block_size + 1) > self.free:
            steps = min(steps, self._steps_blocks_allow(running))
        return steps, ctx0

    def run_stretch(self, done: int, steps: int, clocks: np.ndarray | None) -> None:
        """`done` steps of a `steps`-step decode stretch ran, ending at `clocks` (recorded by the caller)."""
        running, bs = self.running, self.config.block_size
        n = len(running)
        first = float(clocks[0]) if self.record and clocks is not None else None
        first_gaps: list[float] = []
        clock, last_step, free = self.clock, self.steps + done - 1, self.free
        if self.pool is not None:
            self.stretch_blocks_hashed(running, done)
        for r in running:
            if first is not None:
                first_gaps.append(first - r.last_s)
            r.computed += done
            r.known += done
            r.generated += done
            need = -(-r.computed // bs) - r.blocks
            if self.pool is not None and r.computed // bs > r.registered:
                self.grow_hashed(r, 0, r.computed)  # its blocks came in step order above
            r.blocks += need
            free -= need
            r.last_step, r.last_s = last_step, clock
        self.peak = max(self.peak, self.config.num_gpu_blocks - free)
        if self.queue:
            self._evict(self.free - free)
        self.free = free
        if first is not None and clocks is not None:
            self.itl.extend(first_gaps)
            self.itl.extend((clocks[1:] - clocks[:-1]).repeat(n).tolist())  # as the step-by-step path computes a gap
        if done == steps:
            self._finish_stretch()
        self.steps += done
        self.fast_steps += done
        self.max_running = max(self.max_running, n)

    def _steps_blocks_allow(self, running: list[RequestState]) -> int:
        """How many decode steps the free blocks carry every running request through. Request r
        takes its next block at step o_r = blocks*bs - computed + 1 (1..bs), then every bs steps, so
        block takes in step order are the sorted o's, then the sorted o's + bs, ...; the step of
        take number `free` (counting from 0) is the first that runs short."""
        bs = self.config.block_size
        offsets = sorted(r.blocks * bs - r.computed + 1 for r in running)
        if offsets[0] < 1 or offsets[-1] > bs:  # not a decode's steady block count: step one at a time
            return 0
        free, n = self.free, len(running)
        return offsets[free % n] + (free // n) * bs - 1

    def _head_blocked(self, n: int) -> bool:
        """True when the first waiting request cannot be admitted beside `n` decodes, now or at any
        later step before a request finishes: the seat limit holds, the token budget left is fixed
        and decodes only take free blocks away (V1's admission; V0 is stepped one at a time)."""
        cfg = self.config
        if not cfg.chunked_prefill:
            return False
        budget = cfg.max_num_batched_tokens - n
        if budget <= 0 or n >= cfg.max_num_seqs:
            return True
        if self.pool is not None:
            # with a CPU tier a lookup touches its LRU order, once a step: step one at a time
            return self.tier is None and self.head_blocked_hashed(budget)
        r = self.waiting[0]
        m = min(r.known - r.computed, budget)
        return -(-(r.computed + m) // cfg.block_size) - r.blocks > self.free

    def _count_blocked_head(self, steps: int, hits: list[int], n: int) -> None:
        """Each step of the stretch tries the blocked queue head once, as stepping would (unless the
        seat limit or the budget stops the scheduler before it), and vLLM counts each lookup. Its
        hits (`hits`, as the stretch began) shrink from the step whose new block evicts one of them:
        the running requests take their blocks before the head is looked up."""
        cfg = self.config
        if n >= cfg.max_num_seqs or cfg.max_num_batched_tokens - n <= 0:
            return
        index = {b: i for i, b in enumerate(hits)}
        cuts = sorted((step, index[b]) for step, b in self.stretch_takes if b in index)
        total, length, at = 0, len(hits), 1
        for step, i in cuts:
            total += length * (step - at)
            length, at = min(length, i), step
        total += length * (steps + 1 - at)
        self.count_lookup(self.waiting[0], total * cfg.block_size, steps)

    def _send_during(self, bounds: np.ndarray) -> None:
        """Send the requests that arrive during a blocked stretch as `send` would at each step
        boundary (`bounds`: the clock before each of the stretch's later steps)."""
        last = bounds[-1]
        while self.in_flight < self.cap:
            r = self.pop_due(float(last))
            if r is None:
                break
            j = int(bounds.searchsorted(r.arrival_s))  # the first boundary at or after its arrival
            waited = r.arrival_s <= self.full_s  # it waited for a client slot: sent at the boundary
            self._hand_over(r, float(bounds[j]) if waited else float(r.arrival_s), self.steps + j + 1)
        if self.in_flight >= self.cap and self.next_due_s() <= last:
            self.full_s = float(last)  # as `send` marks it at each boundary a due request finds no slot

    def _time_stretch(self, n: int, steps: int, ctx0: int, due: float) -> tuple[int, np.ndarray]:
        """Time up to `steps` decode steps of `n` requests (`ctx0` tokens cached) at once: contexts grow
        by n a step; the clock is accumulated left to right from the current one (cumsum is
        sequential), so every value is the one the step-by-step loop would produce, bit for bit. A
        step runs while the clock before it is short of `due`. Returns (steps run, their end times)."""
        clocks = stretch_clocks(self.stretch_costs(n, steps, ctx0), self.clock, due)
        self.record_stretch(n, ctx0, clocks)
        return len(clocks), clocks

    def stretch_costs(self, n: int, steps: int, ctx0: int, ahead: int = 0) -> np.ndarray:
        """Each step's duration in a stretch of `steps` decodes of `n` requests holding `ctx0` tokens.
        `ahead`: time that many steps (the requests' own stretch) and keep them: a lockstep group cuts
        a rank's stretch at other ranks' events, and the rank's next one continues the same batch
        (each step's cost depends on its own context only, so a slice equals timing it afresh)."""
        memo = self._stretch_memo
        if memo is not None and memo[0] == n and ctx0 >= memo[1] and (ctx0 - memo[1]) % n == 0:
            first = (ctx0 - memo[1]) // n
            if first + steps <= len(memo[2]):
                return memo[2][first:first + steps].copy()
        total = max(steps, ahead)
        ctxs = np.arange(ctx0 + n, ctx0 + n * (total + 1), n, dtype=np.int64)[:total]
        costs = np.array(self.cost.step_s(StepShape(n, n, ctxs, ctxs, 0, n)), dtype=float)
        if costs.shape != (total,):  # a cost model that ignores the context
            costs = np.full(total, float(costs))
        if ahead:
            self._stretch_memo = (n, ctx0, costs)
        return costs[:steps].copy()

    def record_stretch(self, n: int, ctx0: int, clocks: np.ndarray) -> None:
        """The stretch's steps ran, ending at `clocks`: their shapes recorded, the clock at the last."""
        done = len(clocks)
        if self.record:
            ctx_list = np.arange(ctx0 + n, ctx0 + n * (done + 1), n, dtype=np.int64)[:done].tolist()
            for col, v in zip(
                self.cols, ([n] * done, [n] * done, [0] * done, ctx_list, ctx_list, [n] * done, clocks.tolist())
            ):
                col.extend(v)
        self.clock = clocks[-1]

    def _finish_stretch(self) -> None:
        """The stretch's last step sampled the last token of its shortest requests: finish them as
        `_advance` does, in running order."""
        for r in self.running:
            if r.generated >= r.out:
                self._finish(r)
        self.running = [r for r in self.running if r.computed >= 0]
