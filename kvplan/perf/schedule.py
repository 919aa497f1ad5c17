"""vLLM's scheduling on a simulated clock: continuous batching, the chunked-prefill token budget
(V1) or prefill-first steps (V0 without chunked prefill), block allocation and recompute
preemption, client-side `--max-concurrency`.

It is written for speed (`kvplan predict` simulates 1,000 requests in well under 2 s), so it
keeps per-request integers instead of the engine's `Sequence` objects. Every step's shape is
recorded in a `Trace`: when no request arrives on a timer (rate inf or a concurrency limit) the
step sequence does not depend on step durations, so the fit re-times a trace with numpy
instead of re-simulating it.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Any

import numpy as np

from kvplan.perf.decode_stretch import DecodeStretches
from kvplan.perf.request_state import RequestState
from kvplan.perf.reuse_blocks import HashedBlocks, uses_hashed_pool
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepCost, StepShape
from kvplan.perf.trace import Trace
from kvplan.workload.request import Request


class Engine(DecodeStretches, HashedBlocks):
    """The scheduler's state between steps; one `step()` is one engine step."""

    def __init__(self, requests: list[Request], config: SchedulerConfig, cost: StepCost,
                 max_concurrency: int | None, frontend_s: float = 0.0, watch: Any = None, record: bool = True) -> None:
        self.config, self.cost, self.record = config, cost, record
        self.watch, self.missed = watch, False
        self.frontend_s, self.frontend_free = frontend_s, 0.0
        self.frontend: deque[RequestState] = deque()  # sent, still in the API server
        self.free = config.num_gpu_blocks
        # vLLM V1's free queue (LRU, evicted from the head), tracked only while a preempted request's
        # freed blocks are in it: [owner or None, blocks] runs, head first. A preempted request's
        # full blocks keep their hashes there until evicted, and its recompute starts from them
        self.queue: deque[list] = deque()
        self.cached_runs = 0  # runs in `queue` a preempted request still owns (0: stop tracking)
        self.watermark = (
            int(0.01 * config.num_gpu_blocks) if not config.chunked_prefill else 0
        )  # V0 admission watermark
        self.reqs = [RequestState(r) for r in requests]
        self.pool = None  # blocks by id (`reuse_blocks`) when prompts carry token ids; else counts
        self.later: list[tuple[float, int, RequestState]] = []  # conversations' released turns
        self.loading: list[RequestState] = []  # waiting on a CPU tier's copy (`cpu_offload`)
        self.stores: list[int] = []
        self.reuse: dict[str, float] = dict.fromkeys(("queries_tokens", "hit_tokens", "preempted_queries_tokens",
                                                      "preempted_hit_tokens"), 0)
        sent = self.setup_hashed(requests, self.reqs) if uses_hashed_pool(requests, config) else self.reqs
        if self.pool is None and any(r.follows_turn for r in requests):
            raise ValueError("a conversation's turns need prefix caching on and every prompt's token ids")
        self.pending = deque(sorted(sent, key=lambda q: q.arrival_s))  # stable: equal arrivals keep their order
        self.waiting: deque[RequestState] = deque()
        self.held: deque[RequestState] = deque()  # reached the busy engine during the last step (async scheduling)
        self.running: list[RequestState] = []
        self.cols: list[list[float]] = [[] for _ in range(7)]
        self.itl: list[float] = []
        self.clock = 0.0
        self.horizon_s = float("inf")  # behind a router: when the next request may be routed here
        self.full_s = -1.0  # when a due request last found every client slot taken
        self.steps = self.in_flight = self.peak = self.max_running = self.preemptions = self.fast_steps = 0
        self.cap = max_concurrency or len(self.reqs) or 1

    def send(self) -> bool:
        """Hand arrived requests to the server (within the client's concurrency); the API server
        passes them on one at a time, `frontend_s` each; False: the engine is idle."""
        if self.held:  # a step has run since they arrived: the next one is scheduled with them
            self.waiting.extend(self.held)
            self.held.clear()
        while True:
            r = self.pop_due(self.clock) if self.in_flight < self.cap else None
            if r is None:
                if self.in_flight >= self.cap and self.next_due_s() <= self.clock:
                    self.full_s = self.clock  # a due request found every client slot taken
                break
            # vLLM's client starts a request's clock when it sends it (benchmarks/lib/
            # endpoint_request_func.py, `st`): when it came due, even mid-step, unless it waited for
            # a --max-concurrency slot (sent now, as a slot frees)
            waited = r.arrival_s <= self.full_s
            self._hand_over(r, max(self.clock, r.arrival_s) if waited else r.arrival_s, self.steps)
        while self.frontend and self.frontend[0].ready_s <= self.clock:
            self._arrive(self.frontend.popleft())
        if not self.waiting and not self.running:
            if self.loading and self.next_load_s() <= self.clock:
                return True  # a copy from the CPU tier ended: its request is scheduled
            # idle until the next arrival, hand-over or end of a copy
            self.clock = max(self.clock, min(self.next_event_s(), self.next_load_s()))
            return False
        return True

    def _hand_over(self, r: RequestState, send_s: float, send_step: int) -> None:
        """The client sends `r`: it waits in the API server (`frontend_s` each, one at a time) or,
        without one, for the scheduler."""
        r.send_s, r.send_step = send_s, send_step
        self.in_flight += 1
        if self.frontend_s:
            r.ready_s = self.frontend_free = max(send_s, self.frontend_free) + self.frontend_s
            self.frontend.append(r)
        else:
            r.ready_s = send_s
            self._arrive(r)

    def _arrive(self, r: RequestState) -> None:
        """`r` reaches the engine at a step boundary. With async scheduling and requests running, the
        step about to run was scheduled while the last one ran, without `r`: it is held for one step."""
        (self.held if self.config.async_scheduling and self.running else self.waiting).append(r)

    def next_event_s(self) -> float:
        """When the engine next gets a request it does not have yet (inf: never)."""
        due = self.frontend[0].ready_s if self.frontend else float("inf")
        if self.in_flight < self.cap:
            if self.pending:
                due = min(due, self.pending[0].arrival_s)
            if self.later:
                due = min(due, self.later[0][0])
        return min(due, self.horizon_s)

    def inject(self, r: RequestState) -> None:
        """A router sends `r` here (arrivals come in time order, so `pending` stays sorted)."""
        self.reqs.append(r)
        self.pending.append(r)

    def next_due_s(self) -> float:
        """When the next request not yet sent comes due (inf: none)."""
        due = self.pending[0].arrival_s if self.pending else float("inf")
        return min(due, self.later[0][0]) if self.later else due

    def pop_due(self, by_s: float) -> RequestState | None:
        """The next request due by `by_s` not yet sent: a conversation's released turn first (its user
        is waiting on it; a closed loop's client keeps its slot for its conversation), then the
        earliest scheduled arrival."""
        pending, later = self.pending, self.later
        if later and later[0][0] <= by_s:
            return heapq.heappop(later)[2]
        if pending and pending[0].arrival_s <= by_s:
            return pending.popleft()
        return None

    def _prefill_v0(self) -> list[tuple[RequestState, int]]:
        """V0 without chunked prefill: a step of whole prompts whenever one can be admitted."""
        scheduled: list[tuple[RequestState, int]] = []
        tokens = 0
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            r = self.waiting[0]
            n = r.known - r.computed
            need = -(-(r.computed + n) // self.config.block_size)
            if tokens + n > self.config.max_num_batched_tokens or self.free - need < self.watermark:
                break
            self.waiting.popleft()
            self.free -= need
            if self.queue:
                self._evict(need)
            r.blocks = need
            self.running.append(r)
            scheduled.append((r, n))
            tokens += n
        return scheduled

    def _evict(self, n: int) -> None:
        """`n` blocks taken from the free queue's head: the oldest freed go first, and a preempted
        request's own blocks last-first (vLLM frees a request's blocks in reverse order)."""
        queue = self.queue
        while n > 0 and queue:
            head = queue[0]
            take = head[1] if head[1] < n else n
            head[1] -= take
            n -= take
            if head[1] == 0:
                queue.popleft()
                if head[0] is not None:  # a preempted request's last cached block evicted
                    head[0] = None
                    self.cached_runs -= 1
        if not self.cached_runs:
            queue.clear()  # no hashes left to keep track of

    def _freed(self, r: RequestState, blocks: int) -> None:
        """`blocks` go back to the free queue's tail; a preempted request's are kept as its run."""
        if r.computed >= 0 and r.generated < r.out and self.config.prefix_caching and self.config.chunked_prefill:
            # preempted, not finished, under V1's prefix caching: its full blocks stay hashed
            if not self.queue and self.free - blocks > 0:
                self.queue.append([None, self.free - blocks])  # the free blocks ahead of it
            entry = [r, blocks]
            self.queue.append(entry)
            self.cached_runs += 1
            r.freed = (entry, r.computed // self.config.block_size)
        elif self.queue:
            self.queue.append([None, blocks])

    def _hit_blocks(self, r: RequestState) -> int:
        """Blocks of a preempted request still cached: its full ones not yet evicted, at most all
        but its last token's (vLLM computes at least one token)."""
        if r.freed is None:
            return 0
        entry, full = r.freed
        left = entry[1] if entry[0] is r else 0
        return max(0, min(left, full, (r.known - 1) // self.config.block_size))

    def _reclaim(self, r: RequestState, hits: int) -> None:
        """The cached blocks a preempted request hits leave the free queue and are its own again."""
        if r.freed is not None:
            entry = r.freed[0]
            if entry[0] is r:
                entry[0], entry[1] = None, entry[1] - hits
                self.cached_runs -= 1
            r.freed = None
        if hits:
            r.computed, r.blocks = hits * self.config.block_size, hits
            self.free -= hits

    def _preempt_for(self, r: RequestState, need: int) -> bool:
        """Recompute-preempt the newest running requests until `need` blocks are free; False if
        `r` itself had to go."""
        while need > self.free:
            victim = self.running.pop()
            if self.pool is not None:
                self.release_hashed(victim)
                victim.preempted = True
            else:
                self.free += victim.blocks
                self._freed(victim, victim.blocks)
            victim.blocks = victim.computed = 0
            self.waiting.appendleft(victim)
            self.preemptions += 1
            if victim is r:
                return False
        return True

    def _continuous(self) -> list[tuple[RequestState, int]]:
        """Running requests first (decodes and prefill chunks), then waiting ones in the budget left."""
        bs = self.config.block_size
        scheduled: list[tuple[RequestState, int]] = []
        budget = self.config.max_num_batched_tokens
        preempted_before = self.preemptions
        append, free, running = scheduled.append, self.free, self.running
        i = 0
        while i < len(running) and budget > 0:  # len(): preemption shortens it
            r = running[i]
            n = r.known - r.computed
            if n > budget:
                n = budget
            need = -(-(r.computed + n) // bs) - r.blocks
            if need > free:
                self.free = free
                if not self._preempt_for(r, need):
                    free = self.free
                    break
                free = self.free
            free -= need
            if self.pool is not None:
                if need or (r.computed + n) // bs > r.registered:  # a new block, or one filled
                    self.grow_hashed(r, need, r.computed + n)
            elif self.queue:
                self._evict(need)
            r.blocks += need
            append((r, n))
            budget -= n
            i += 1
        self.free = free
        if not self.config.chunked_prefill or self.preemptions != preempted_before:
            return scheduled
        if self.pool is not None:
            if self.loading:
                self.finish_loads()
            return self._admit_hashed_waiting(scheduled, budget)
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            r = self.waiting[0]
            hits = self._hit_blocks(r) if r.freed is not None else 0
            computed = hits * bs if hits else r.computed
            n = min(r.known - computed, budget)
            need = -(-(computed + n) // bs) - r.blocks  # its hits included: they leave the free queue too
            if need > self.free:
                break
            self.waiting.popleft()
            if r.freed is not None:
                self._reclaim(r, hits)
                need -= hits
            self.free -= need
            if self.queue:
                self._evict(need)
            r.blocks += need
            self.running.append(r)
            scheduled.append((r, n))
            budget -= n
        return scheduled

    def _admit_hashed_waiting(self, scheduled: list[tuple[RequestState, int]],
                              budget: int) -> list[tuple[RequestState, int]]:
        """Waiting requests, head first, each with the prefix hits the hashed pool finds."""
        skipped = []
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            r = self.waiting[0]
            n = self.admit_hashed(r, budget)
            if n < 0:  # its hits are being copied from the CPU tier: the next request is tried
                skipped.append(self.waiting.popleft())
                continue
            if not n:
                break
            self.waiting.popleft()
            self.running.append(r)
            scheduled.append((r, n))
            budget -= n
        del skipped  # they wait in `loading`
        return scheduled

    @staticmethod
    def _shape(scheduled: list[tuple[RequestState, int]]) -> StepShape:
        """The shape of the scheduled requests' step, before their tokens are computed (pairs:
        `step_cost.causal_pairs`, inlined: this runs once per simulated step)."""
        tok = pre = ctx = pairs = sampled = chunks = chunk_pairs = 0
        for r, n in scheduled:
            c = r.computed + n
            tok += n
            ctx += c
            if n > 1:
                pre += n
                p = n * (r.computed + (n + 1) // 2)
                pairs += p
                chunks += 1
                chunk_pairs += p
            else:
                pairs += c
            sampled += c == r.known
        return StepShape(tok, len(scheduled), ctx, pairs, pre, sampled, chunks, chunk_pairs)

    def _finish(self, r: RequestState) -> None:
        """`r` sampled its last token (at `r.last_s`): its blocks go back; the caller drops it from running."""
        if self.watch is not None and r.out > 1 and self.watch.finished(r.first_s, r.last_s, r.out):
            self.missed = True
        if self.pool is not None:
            self.release_hashed(r)
            self.release_next_turn(r)
        else:
            self.free += r.blocks
            if self.queue:
                self.queue.append([None, r.blocks])
        r.blocks = 0
        r.computed = -1  # marks finished
        self.in_flight -= 1

    def step(self) -> None:
        scheduled, shape, cost_s = self.plan_step()
        self.commit_step(scheduled, shape, self.clock + cost_s)

    def plan_step(self) -> tuple[list[tuple[RequestState, int]], StepShape, float]:
        """Schedule the next step (its batch is then fixed): (batch, its shape, its duration)."""
        scheduled = self._prefill_v0() if not self.config.chunked_prefill and self.waiting else []
        if not scheduled:
            scheduled = self._continuous()
        if not scheduled:
            if self.loading:  # only copies from the CPU tier in flight: the engine waits for them
                return [], StepShape(0, 0, 0, 0, 0, 0), max(0.0, self.next_load_s() - self.clock)
            raise RuntimeError("a request needs more KV blocks than the pool holds")  # longer than the pool
        shape = self._shape(scheduled)
        return scheduled, shape, self.cost.step_s(shape)

    def commit_step(self, scheduled: list[tuple[RequestState, int]], shape: StepShape, end_s: float) -> None:
        """Run the planned step until `end_s` (its own duration on, or a lockstep group's longest)."""
        self.clock = end_s
        if self.stores:
            self.stores_done()
        if not scheduled:  # the engine only waited for a copy from the CPU tier
            return
        self.peak = max(self.peak, self.config.num_gpu_blocks - self.free)
        self.max_running = max(self.max_running, len(self.running))
        if self.record:
            for col, v in zip(self.cols, (shape.num_tokens, shape.num_seqs, shape.num_prefill_tokens,
                                          shape.context_tokens, shape.attention_pairs, shape.num_sampled, self.clock)):
                col.append(v)
        self._advance(scheduled)
        self.steps += 1

    def _advance(self, scheduled: list[tuple[RequestState, int]]) -> None:
        """Tokens computed; a request whose known tokens are all cached samples one more."""
        done = False
        clock, steps, itl_append, watch, record = self.clock, self.steps, self.itl.append, self.watch, self.record
        for r, n in scheduled:
            r.computed += n
            if r.start_step < 0:
                r.start_step = steps
            if r.computed != r.known:
                continue
            r.generated += 1
            r.known += 1
            if r.first_step < 0:
                r.first_step, r.first_s = steps, clock
                if watch is not None and watch.first_token(r.send_s, clock):
                    self.missed = True
            elif record:
                itl_append(clock - r.last_s)
            r.last_step, r.last_s = steps, clock
            if r.generated >= r.out:
                self._finish(r)
                done = True
        if done:
            self.running = [r for r in self.running if r.computed >= 0]

    def trace(self) -> Trace:
        reqs = self.reqs
        tok, seqs, pre, ctx, pairs, sampled, end = (np.asarray(c, dtype=float) for c in self.cols)
        return Trace(tok, seqs, pre, ctx, pairs, sampled, end,
                     send_step=np.array([r.send_step for r in reqs]), send_s=np.array([r.send_s for r in reqs]),
                     first_step=np.array([r.first_step for r in reqs]), last_step=np.array([r.last_step for r in reqs]),
                     start_step=np.array([r.start_step for r in reqs]), ready_s=np.array([r.ready_s for r in reqs]),
                     prompt_tokens=np.array([r.prompt for r in reqs]), output_tokens=np.array([r.out for r in reqs]),
                     first_token_s=np.array([r.first_s for r in reqs]), last_token_s=np.array([r.last_s for r in reqs]),
                     itl_s=np.asarray(self.itl), peak_used_blocks=self.peak, max_running=self.max_running,
                     num_preemptions=self.preemptions,
                     timed_arrivals=bool(self.frontend_s) or any(r.arrival_s > 0 for r in reqs),
                     extras={"fast_decode_steps": self.fast_steps, "missed_slo": self.missed,
                             **({"prefix_cache": self.reuse_figures()} if self.pool is not None else {})})


def simulate(requests: list[Request], config: SchedulerConfig, cost: StepCost,
             max_concurrency: int | None = None, max_steps: int = 5_000_000, fast: bool = True,
             frontend_s: float = 0.0, watch: Any = None, record: bool = True) -> Trace:
    """Run every request to completion; `cost` gives each step's duration, `frontend_s` the API
    server's serial time per request. `fast=False` steps one at a time even through pure-decode
    stretches (the tests compare the two). `watch` (slo_watch.SloWatch) is told each first token and
    each finish, and stops the run as soon as it says the SLO is missed for sure: the trace is then
    partial and `extras["missed_slo"]` is True. `record=False` leaves the per-step columns and the
    ITL samples empty: a search probe needs only each request's send, first and last token times."""
    engine = Engine(requests, config, cost, max_concurrency, frontend_s, watch, record)
    return drive(engine, max_steps, fast).trace()


def drive(engine: Engine, max_steps: int = 5_000_000, fast: bool = True) -> Engine:
    """Step `engine` until every request is done (or its SLO watch gives up); returns it."""
    while (engine.pending or engine.later or engine.frontend or engine.waiting or engine.held
           or engine.running or engine.loading) and not engine.missed:
        if not engine.send():
            continue
        if engine.steps >= max_steps:
            raise RuntimeError("simulation did not converge")  # internal invariant: every step makes progress
        if not (fast and engine.fast_decode()):
            engine.step()
    return engine
