"""Predict a stress run without running the model: the engine's own `Scheduler` and
`BlockManager` on a simulated clock, each step timed by a cost model (`cost.py`).

Because the scheduling code is the engine's, block counts, admission, preemption and prefix hits
follow the same rules as the real run; only the clock is modelled. Replicas: one scheduler and pool
per replica, requests dealt by the run's own `ReplicaRouter`, the replicas stepping one after
another in rounds, as the runner steps the engines. With every request arriving at
once (or a closed loop), the step sequence is independent of timing and the prediction of memory
and preemption is exact; with open-loop arrivals it is as good as the cost model.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from math import ceil

from kvplan.engine.block_manager import BlockManager
from kvplan.engine.sampling_params import SamplingParams
from kvplan.engine.scheduler import Scheduler
from kvplan.engine.sequence import Sequence
from kvplan.perf.step_cost import StepCost, StepShape
from kvplan.stress.replica_router import ReplicaRouter
from kvplan.workload.request import Request
from kvplan.workload.turns import TurnChain


@dataclass(frozen=True)
class SimSample:
    """Named as the measured `TimelineSample` fields, so the report overlays them directly."""

    t_s: float
    kv_bytes_used: int
    running: int
    waiting: int
    preemptions: int  # cumulative
    prefix_hit_tokens: int  # cumulative


@dataclass(frozen=True)
class SimRecord:
    request_id: str
    class_name: str
    arrival_s: float
    token_times_s: tuple[float, ...]
    prompt_tokens: int
    output_tokens: int

    @property
    def first_token_s(self) -> float:
        return self.token_times_s[0]


@dataclass
class SimResult:
    num_gpu_blocks: int
    kv_cache_bytes: int
    bytes_per_block: int
    records: list[SimRecord] = field(default_factory=list)
    timeline: list[SimSample] = field(default_factory=list)
    num_steps: int = 0
    peak_kv_bytes: int = 0
    max_running: int = 0
    num_preemptions: int = 0
    evicted_blocks: int = 0  # cached blocks a new allocation took the hash from
    cpu_hit_tokens: int = 0  # prompt tokens the CPU tier served
    computed_prompt_tokens: int = 0  # prompt tokens neither cache served
    first_preemption_step: int | None = None
    first_preemption_s: float | None = None

    @property
    def duration_s(self) -> float:
        return self.timeline[-1].t_s if self.timeline else 0.0


class _Simulation:
    """The engine's scheduler on a simulated clock, one per replica (a router deals the requests);
    `step(i)` is one step of replica `i`. Replicas step one after another on one clock, as the
    runner steps them."""

    def __init__(self, scheds: list[Scheduler], result: SimResult, cost_model: StepCost, max_model_len: int,
                 router: ReplicaRouter | None = None) -> None:
        self.scheds, self.result, self.cost_model, self.router = scheds, result, cost_model, router
        self.max_model_len = max_model_len
        self.seqs: dict[int, Request] = {}  # seq id -> its request
        self.clock = 0.0
        self.admitted = self.in_flight = self.preemptions = self.hits = 0
        self.last_full_s = -1.0  # when a due request last found every client slot taken
        self.turns = TurnChain()  # conversations: a later turn is released when the one before it ends

    def has_unfinished(self) -> bool:
        return any(s.has_unfinished() for s in self.scheds)

    def admit(self, req: Request, at_s: float, prompt_ids: list[int] | None = None) -> None:
        ids = list(req.token_ids) if prompt_ids is None else prompt_ids
        self.turns.sent(req, ids)
        seq = Sequence(self.admitted, req.request_id, ids,
                       SamplingParams(max_tokens=req.output_tokens, ignore_eos=True, temperature=0.0), at_s)
        i = self.router.pick(req.request_id, ids, req.session_id) if self.router is not None else 0
        self.seqs[seq.seq_id] = req
        self.scheds[i].add(seq)
        self.admitted += 1
        self.in_flight += 1

    def send_closed(self, pending: deque[Request], concurrency: int) -> None:
        """A closed loop keeps `concurrency` requests in flight: released turns first, then new ones."""
        while self.turns.due and self.in_flight < concurrency:
            released = self.turns.pop_due(self.clock)
            if released is None:
                break
            self.admit(released[1], self.clock, released[2])
        while pending and self.in_flight < concurrency:
            self.admit(pending.popleft(), self.clock)

    def send_due(self, pending: deque[Request], max_in_flight: int | None) -> None:
        """Send what is due now: released turns, then arrivals; a due request that finds every client
        slot taken waits for one and counts its latency from when it is sent."""
        while self.turns.due and self.turns.due[0][0] <= self.clock:
            if max_in_flight is not None and self.in_flight >= max_in_flight:
                self.last_full_s = self.clock
                break
            released = self.turns.pop_due(self.clock)
            assert released is not None
            due_s, turn, ids = released
            self.admit(turn, self.clock if due_s <= self.last_full_s else due_s, ids)
        while pending and (pending[0].arrival_s or 0.0) <= self.clock:
            if max_in_flight is not None and self.in_flight >= max_in_flight:
                self.last_full_s = self.clock
                break
            req = pending.popleft()
            due = req.arrival_s or 0.0
            self.admit(req, self.clock if due <= self.last_full_s else due)

    def step(self, i: int) -> None:
        result, sched = self.result, self.scheds[i]
        bm, batch = sched.block_manager, sched.schedule()
        # a request samples when this step computes the last of its known tokens
        sampled = sum(s.num_computed_tokens + n == len(s) for s, n in zip(batch.seqs, batch.num_new_tokens))
        shape = StepShape.from_counts([s.num_computed_tokens for s in batch.seqs], list(batch.num_new_tokens), sampled)
        self.clock += float(self.cost_model.step_s(shape)) if batch.seqs else 0.0
        result.num_steps += 1
        if batch.num_preempted and result.first_preemption_step is None:
            result.first_preemption_step, result.first_preemption_s = result.num_steps, self.clock
        self.preemptions += batch.num_preempted
        self.hits += batch.num_prefix_hit_tokens
        result.cpu_hit_tokens += batch.num_cpu_hit_tokens
        result.computed_prompt_tokens += batch.num_computed_prompt_tokens
        bm.stores_done(bm.take_stores()[1])  # the step's copies to the CPU tier ended
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            seq.num_computed_tokens += n
        for seq in batch.seqs:
            if seq.num_computed_tokens == len(seq):  # a prefill chunk short of the last prompt token samples nothing
                self._sample(seq, sched)
        used = sum(s.block_manager.num_used_blocks for s in self.scheds) * result.bytes_per_block
        result.peak_kv_bytes = max(result.peak_kv_bytes, used)
        running = sum(len(s.running) for s in self.scheds)
        result.max_running = max(result.max_running, running)
        result.timeline.append(SimSample(self.clock, used, running, sum(len(s.waiting) for s in self.scheds),
                                         self.preemptions, self.hits))

    def _sample(self, seq: Sequence, sched: Scheduler) -> None:
        # a stand-in token: distinct per sequence so generated blocks never alias in the prefix cache
        seq.append_token((seq.seq_id * 7919 + len(seq)) % 1_000_003, self.clock)
        if seq.num_output_tokens >= seq.params.max_tokens or len(seq) >= self.max_model_len:
            sched.finish(seq, "length")
            self.in_flight -= 1
            req = self.seqs[seq.seq_id]
            if self.router is not None:
                self.router.finished(req.request_id)
            self.turns.ended(req.request_id, seq.output_token_ids, self.clock)
            self.result.records.append(
                SimRecord(
                    req.request_id,
                    req.class_name,
                    seq.arrival_time_s,
                    tuple(seq.token_times_s),
                    seq.num_prompt_tokens,
                    seq.num_output_tokens,
                )
            )


def simulate_engine(requests: list[Request], *, num_gpu_blocks: int, bytes_per_block: int, block_size: int,
             max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int, cost_model: StepCost,
             allocator: str = "paged", enable_prefix_caching: bool = False, concurrency: int | None = None,
             num_cpu_blocks: int = 0, max_steps: int = 10_000_000, max_in_flight: int | None = None,
             num_tier_blocks: int = 0, replicas: int = 1, router: str | None = None) -> SimResult:
    """Run the scheduler to completion on a simulated clock (seconds from the first arrival).
    `max_in_flight`: an open loop's client-side cap; a due request waits for a slot and counts its
    latency from when it is sent, as `vllm bench serve --max-concurrency` does. `replicas` engines,
    each with its own pool of `num_gpu_blocks`, behind `router` (the pool figures sum them)."""
    scheds = []
    for _ in range(replicas):
        bm = BlockManager(num_gpu_blocks, block_size, enable_prefix_caching=enable_prefix_caching,
                          reserve_blocks_per_seq=ceil(max_model_len / block_size) if allocator == "contiguous"
                          else None, num_cpu_blocks=num_cpu_blocks, num_tier_blocks=num_tier_blocks)
        scheds.append(Scheduler(bm, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                enable_swap=num_cpu_blocks > 0))
    result = SimResult(num_gpu_blocks, num_gpu_blocks * bytes_per_block * replicas, bytes_per_block)
    sim = _Simulation(scheds, result, cost_model, max_model_len,
                      ReplicaRouter(router, scheds) if router is not None else None)
    closed = concurrency is not None
    firsts = list(sim.turns.first_turns(requests))
    pending = deque(sorted(firsts, key=lambda r: r.arrival_s or 0.0) if not closed else firsts)
    while pending or sim.turns.due or sim.has_unfinished():
        if closed:
            assert concurrency is not None
            sim.send_closed(pending, concurrency)
            if not sim.has_unfinished():  # only conversations thinking
                sim.clock = sim.turns.next_due_s or sim.clock
                continue
        else:
            sim.send_due(pending, max_in_flight)
            if not sim.has_unfinished():
                sim.clock = min(pending[0].arrival_s or 0.0 if pending else float("inf"),
                                sim.turns.next_due_s or float("inf"))  # idle until the next arrival
                continue
        if result.num_steps >= max_steps:
            raise RuntimeError("simulation did not converge")  # internal invariant: the scheduler must progress
        for i, sched in enumerate(scheds):  # one round: each replica with work steps once, as the runner does
            if sched.has_unfinished():
                sim.step(i)
    result.num_preemptions = sim.preemptions
    result.evicted_blocks = sum(s.block_manager.num_evicted_blocks for s in scheds)
    return result
