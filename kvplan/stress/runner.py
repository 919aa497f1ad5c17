"""Drive the in-process engine with a scenario's request stream, by the wall clock.

Open loop: each request is submitted when its `arrival_s` comes due (seconds after the run
start); between arrivals an idle engine sleeps. Closed loop: the runner keeps the allowed number
of requests open, topping up between engine steps, so the scheduling (and so the memory figures)
depends on token counts only. Every step appends a timeline sample: KV bytes in use and pool size
from the engine, queue lengths and counters, process RSS and, on CUDA, the allocator's figures.
Ctrl-C stops the loop; what was measured so far is returned with `complete=False`.

Replicas (a scenario's `replicas` and `router`): several engines, each with its own pool, share the
loop. A request is routed when it is sent (`replica_router.py`); the engines with work then step one
after another, a round per loop, and each step's sample sums every replica's pool and counters.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvplan.results.record import RequestRecord
from kvplan.results.result import TimelineSample
from kvplan.stress.cpu_waits import CpuWaits
from kvplan.stress.machine_speed import ReferenceSampler, ReferenceTiming
from kvplan.stress.memory import NvmlSampler, cuda_bytes, rss_bytes
from kvplan.stress.replica_router import ReplicaRouter
from kvplan.stress.run_queue import RunQueueClock
from kvplan.stress.scenario import Scenario
from kvplan.workload.arrivals import ClosedLoop
from kvplan.workload.request import Request
from kvplan.workload.turns import TurnChain

if TYPE_CHECKING:
    from kvplan.engine.llm_engine import LLMEngine
    from kvplan.perf.step_cost import StepShape


@dataclass
class EngineRun:
    records: list[RequestRecord] = field(default_factory=list)
    timeline: list[TimelineSample] = field(default_factory=list)
    step_shapes: list[StepShape] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)  # the engine's own step time
    # from a step's start to the next one's (the engine's step time when the runner slept between):
    # the runner's bookkeeping between steps is in every token's latency, so machine speed counts it
    step_cycle_s: list[float] = field(default_factory=list)
    last_step_start_s: float | None = None  # None after an idle sleep: the next step starts a new stretch
    complete: bool = True
    num_steps: int = 0
    first_preemption_s: float | None = None
    first_preemption_step: int | None = None
    nvml_error: str | None = None
    cpu_s: float | None = None  # process CPU time during the run (all threads)
    wall_s: float | None = None
    reference: Any = None  # machine_speed.ReferenceTiming: the reference kernel and the steps' run-queue wait
    step_wall_s: float = 0.0  # engine.step() calls, wall time in total
    step_wait_s: float | None = 0.0  # of which the thread waited for a CPU; None: the OS does not say
    # (run clock s, the thread's cumulative run-queue wait s) at each step's start and end (cpu_waits.py)
    wait_marks: list[tuple[float, float]] = field(default_factory=list)


def _sample(engines: list[LLMEngine], stepped: LLMEngine, t_s: float, shape: StepShape,
            nvml: NvmlSampler | None) -> TimelineSample:
    """After `stepped`'s step: its batch, and every replica's pool and counters summed."""
    stats = stepped.stats
    assert stats is not None, "sampled after a step"
    every = [e.stats for e in engines if e.stats is not None]

    def total(name: str) -> int:
        return sum(getattr(x, name) for x in every)

    allocated, peak = cuda_bytes()
    return TimelineSample(
        t_s=t_s, kv_bytes_used=sum(e.block_manager.num_used_blocks * e.bytes_per_block for e in engines),
        kv_pool_bytes=sum(e.kv_cache_bytes for e in engines),
        kv_blocks_used=sum(e.block_manager.num_used_blocks for e in engines), running=total("num_running"),
        waiting=total("num_waiting"), swapped=total("num_swapped"), preemptions=total("total_preemptions"),
        prefix_hit_tokens=total("total_prefix_hit_tokens"), evicted_blocks=total("total_evicted_blocks"),
        cpu_hit_tokens=total("total_cpu_hit_tokens"), computed_prompt_tokens=total("total_computed_prompt_tokens"),
        rss_bytes=rss_bytes(),
        cuda_allocated_bytes=allocated, cuda_max_allocated_bytes=peak,
        nvml_used_bytes=nvml.samples[-1][1] if nvml is not None and nvml.samples else None,
        num_scheduled_tokens=stats.num_scheduled_tokens, step_time_s=stats.step_time_s,
        # the batch's shape, so the cost model can be checked step by step against this run
        num_scheduled_seqs=shape.num_seqs, context_tokens=shape.context_tokens,
        attention_pairs=shape.attention_pairs,
    )


def _warm_up(engine: LLMEngine) -> None:
    """One short request before the clock starts: the first forward pays one-off costs (kernel
    selection, allocator growth) that are not part of serving and that the prediction leaves out."""
    from kvplan.engine import SamplingParams

    vocab = engine.vocab_size
    engine.generate([[3 + i % (vocab - 3) for i in range(24)]],
                    SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0))
    engine.block_manager.reset_prefix_cache()  # the run starts with the pool its prediction starts with
    engine.reset_stats()  # and its counters from zero


class _Session:
    """One run's bookkeeping: which request is next, which are live, what finished."""

    def __init__(self, engines: list[Any], scenario: Scenario, requests: Iterable[Request],
                 on_progress: Callable[[int], None] | None, t0: float) -> None:
        self.engines, self.scenario, self.on_progress, self.t0 = engines, scenario, on_progress, t0
        self.router = ReplicaRouter(scenario.router, [e.scheduler for e in engines]) if scenario.router else None
        arrival = scenario.arrival
        self.closed_loop = arrival if isinstance(arrival, ClosedLoop) else None
        self.turns = TurnChain()  # conversations: a later turn is released when the one before it ends
        self.stream: Iterator[Request] = self.turns.first_turns(requests)
        self.upcoming: Request | None = next(self.stream, None)
        self.live: dict[str, tuple[Request, float, Any]] = {}  # request id -> (spec, arrival on the run clock, engine)
        self.cap = arrival.in_flight_cap  # requests in flight at most (None: no cap)
        self.last_full_s = -1.0  # when a due request last found every slot taken: it is sent when one frees
        self.done = 0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def busy(self) -> bool:
        return any(e.has_unfinished_requests() for e in self.engines)

    def _submit(self, spec: Request, arrival_s: float, prompt_ids: list[int] | None = None) -> None:
        from kvplan.engine.sampling_params import SamplingParams

        ids = list(spec.token_ids) if prompt_ids is None else prompt_ids
        self.turns.sent(spec, ids)
        engine = self.engines[self.router.pick(spec.request_id, ids, spec.session_id) if self.router else 0]
        engine.add_request(
            ids,
            SamplingParams(max_tokens=spec.output_tokens, ignore_eos=True, temperature=0.0, seed=spec.index),
            request_id=spec.request_id,
            arrival_time_s=self.t0 + arrival_s,
        )
        self.live[spec.request_id] = (spec, arrival_s, engine)
        if prompt_ids is None:
            self.upcoming = next(self.stream, None)

    def _released_turns(self, t: float) -> None:
        """Send the conversations' turns due by `t`, within the in-flight cap (as `admit` sends)."""
        while self.turns.due and self.turns.due[0][0] <= t:
            if self.cap is not None and len(self.live) >= self.cap:
                self.last_full_s = t
                return
            released = self.turns.pop_due(t)
            assert released is not None
            due_s, turn, ids = released
            waited = self.closed_loop is not None or due_s <= self.last_full_s  # sent now, not when due
            self._submit(turn, t if waited else due_s, ids)

    def admit(self, t: float, stop_arrivals: bool) -> None:
        """Submit what is due at `t`: open loop by arrival time, closed loop up to the allowed level."""
        if stop_arrivals:
            self.upcoming = None
            self.turns.due.clear()
        self._released_turns(t)
        while self.upcoming is not None:
            if self.closed_loop is not None and len(self.live) < self.closed_loop.limit(t):
                self._submit(self.upcoming, t)
            elif self.closed_loop is None and (self.upcoming.arrival_s or 0.0) <= t:
                if self.cap is not None and len(self.live) >= self.cap:
                    self.last_full_s = t
                    break
                due = self.upcoming.arrival_s or 0.0  # a request that waited for a slot is sent now, as vLLM's client
                self._submit(self.upcoming, t if due <= self.last_full_s else due)
            else:
                break

    def finish(self, out: Any) -> RequestRecord:
        spec, arrival_s, _ = self.live.pop(out.request_id)
        if self.router is not None:
            self.router.finished(out.request_id)
        times = tuple(x - self.t0 for x in out.token_times_s)
        self.turns.ended(out.request_id, out.output_token_ids, times[-1] if times else self.now())
        self.done += 1
        if self.on_progress:
            self.on_progress(self.done)
        return RequestRecord(
            request_id=spec.request_id, class_name=spec.class_name, arrival_s=arrival_s,
            first_token_s=times[0] if times else None, token_times_s=times, finish_s=times[-1] if times else self.now(),
            prompt_tokens=spec.prompt_tokens, output_tokens=len(out.output_token_ids), status="ok",
            is_warmup=spec.is_warmup, num_preemptions=out.num_preemptions,
            queue_s=max(0.0, arrival_s - (spec.arrival_s if spec.arrival_s is not None else 0.0)))

    def abort_live(self) -> list[RequestRecord]:
        records = []
        for request_id, (spec, arrival_s, engine) in list(self.live.items()):
            engine.abort(request_id)
            records.append(RequestRecord(
                request_id=request_id, class_name=spec.class_name, arrival_s=arrival_s, first_token_s=None,
                token_times_s=(), finish_s=self.now(), prompt_tokens=spec.prompt_tokens, output_tokens=0,
                status="aborted", error="interrupted (Ctrl-C)", is_warmup=spec.is_warmup))
        return records


def _step(engine: Any, session: _Session, run: EngineRun, probe: Any, nvml: NvmlSampler | None,
          reference: ReferenceSampler, queue: RunQueueClock) -> None:
    """One step of one replica (`probe`: its StepProbe), recorded."""
    wait0, start = queue.wait_s(), time.perf_counter()
    if run.last_step_start_s is not None and run.step_cycle_s:
        run.step_cycle_s[-1] = start - run.last_step_start_s
    run.last_step_start_s = start
    outputs = engine.step()
    run.step_wall_s += time.perf_counter() - start
    end, wait1 = time.perf_counter(), queue.wait_s()
    run.step_wait_s = (
        None if wait0 is None or wait1 is None or run.step_wait_s is None else run.step_wait_s + wait1 - wait0
    )
    if wait0 is not None and wait1 is not None:
        run.wait_marks += [(start - session.t0, wait0), (end - session.t0, wait1)]
    run.num_steps += 1
    stats = engine.stats
    run.step_shapes.append(probe.last)
    run.step_times_s.append(stats.step_time_s)
    run.step_cycle_s.append(stats.step_time_s)  # until the next step's start says more
    if stats.num_preemptions and run.first_preemption_s is None:
        run.first_preemption_s, run.first_preemption_step = stats.time_s - session.t0, run.num_steps
    run.timeline.append(_sample(session.engines, engine, stats.time_s - session.t0, probe.last, nvml))
    run.records.extend(session.finish(out) for out in outputs if out.finished)
    reference.after_step(stats.step_time_s)  # after the bookkeeping: it delays the next step, as a step would


def run_engine(engines: list[Any], scenario: Scenario, requests: Iterable[Request], *,
               on_progress: Callable[[int], None] | None = None, max_duration_s: float | None = None) -> EngineRun:
    """Run `requests` through `engines` (one per replica) by the wall clock; see the module doc."""
    from kvplan.engine.reference_kernel import ReferenceKernel
    from kvplan.stress.step_probe import StepProbe

    probes = [StepProbe(e) for e in engines]
    run = EngineRun()
    duration = max_duration_s if max_duration_s is not None else scenario.duration_s
    for e in engines:
        _warm_up(e)
    config = engines[0].config
    reference = ReferenceSampler(ReferenceKernel(config.device).time_s)
    queue = RunQueueClock()
    # device memory as the driver sees it, from a sampler thread (CUDA only; None where NVML is missing)
    nvml = NvmlSampler().start() if config.is_cuda else None
    session = _Session(engines, scenario, requests, on_progress, time.perf_counter())
    cpu0 = time.process_time()
    try:
        while session.upcoming is not None or session.turns.due or session.busy():
            t = session.now()
            session.admit(t, stop_arrivals=duration is not None and t >= duration)
            if session.busy():
                for engine, probe in zip(engines, probes):  # a round: each replica with work steps once
                    if engine.has_unfinished_requests():
                        _step(engine, session, run, probe, nvml, reference, queue)
            elif (session.upcoming is not None and session.closed_loop is None) or session.turns.due:
                run.last_step_start_s = None
                next_s = min(session.upcoming.arrival_s or 0.0 if session.upcoming is not None else float("inf"),
                             session.turns.next_due_s or float("inf"))
                time.sleep(max(0.0, min(next_s - session.now(), 0.05)))
    except KeyboardInterrupt:
        run.complete = False
        run.records.extend(session.abort_live())
    finally:
        run.cpu_s, run.wall_s = time.process_time() - cpu0, session.now()
        reference.top_up()
        queue.close()
        run.reference = ReferenceTiming(reference.times_s, reference.cpu_s, run.step_wall_s, run.step_wait_s,
                                        CpuWaits.from_marks(run.wait_marks))
        if nvml is not None:
            nvml.stop()
            run.nvml_error = nvml.error
    return run
