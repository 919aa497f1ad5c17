"""Data-parallel replicas of a MoE model stepping together, as vLLM runs them: every rank's forward
meets the others' in each MoE layer's collective, so all ranks run each step at once (a rank with
nothing scheduled runs a dummy batch) and a step lasts as long as the slowest rank's. A prefill
chunk on one rank therefore stalls the decodes of every rank. Each rank is timed on its own batch
by the step model, whose MoE layers already see `dp` times that rank's tokens: the group's batch
padded to this rank's size, so the slowest rank's cost is the step padded to the largest rank, as
vLLM pads a DP step's token count to the largest rank's."""
from __future__ import annotations

from typing import Any

import numpy as np

from kvplan.perf.decode_stretch import stretch_clocks
from kvplan.perf.schedule import Engine
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepCost
from kvplan.perf.trace import Trace
from kvplan.workload.request import Request


def _busy(e: Engine) -> bool:
    return bool(e.pending or e.later or e.loading or e.frontend or e.waiting or e.held or e.running)


def _decode_together(engines: list[Engine], clock: float) -> bool:
    """Every rank with requests runs a pure-decode stretch: run the stretch they share (up to the
    first rank's first finish, block limit or any rank's next arrival) at once, each step as long
    as the slowest rank's; False if some rank cannot (a prefill or a queue to schedule)."""
    if any(e.waiting or e.held for e in engines):
        return False
    runs = [(e, *e.stretch()) for e in engines if e.running]
    common = min((steps for _, steps, _ in runs), default=0)
    due = min(e.next_event_s() for e in engines)
    if common < 2 or clock >= due:
        return False
    slowest = np.max([e.stretch_costs(len(e.running), common, ctx0, ahead=steps) for e, steps, ctx0 in runs], axis=0)
    clocks = stretch_clocks(slowest, clock, due)
    for e, steps, ctx0 in runs:
        e.record_stretch(len(e.running), ctx0, clocks)
        e.run_stretch(len(clocks), steps, clocks)
    return True


def simulate_lockstep(shares: list[tuple[list[Request], int | None]], config: SchedulerConfig, cost: StepCost,
                      frontend_s: float = 0.0, max_steps: int = 5_000_000, fast: bool = True, watch: Any = None,
                      record: bool = True) -> list[Trace]:
    """One trace per rank of `shares` (each rank's requests and its share of the client's
    concurrency); the ranks' steps start and end together. `fast=False` steps one at a time even
    where every rank only decodes (the tests compare the two). `watch` and `record` as in
    `schedule.simulate`: one watch for every rank's requests, and the run stops once it says the
    SLO is missed for sure."""
    engines = [Engine(reqs, config, cost, cap, frontend_s, watch, record) for reqs, cap in shares]
    clock, steps = 0.0, 0
    while any(_busy(e) for e in engines) and not any(e.missed for e in engines):
        for e in engines:
            e.clock = clock
        active = [e for e in engines if e.send()]  # an idle rank's send() moves its clock to its next event
        if not active:  # every rank idle: the group waits for the earliest arrival
            clock = min(e.clock for e in engines if _busy(e))
            continue
        steps += 1
        if steps > max_steps:
            raise RuntimeError("simulation did not converge")  # internal invariant: every step makes progress
        if fast and _decode_together(engines, clock):
            clock = max(e.clock for e in active)
            continue
        plans = [(e, *e.plan_step()) for e in active]
        end_s = clock + max(cost_s for _, _, _, cost_s in plans)
        for e, scheduled, shape, _ in plans:
            e.commit_step(scheduled, shape, end_s)
        clock = end_s
    return [e.trace() for e in engines]
