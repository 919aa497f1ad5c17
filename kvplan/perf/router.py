"""Replicas behind a router (`predict --replicas N --router POLICY`): N engines, each with its own
block pool (and CPU tier), on one clock; every request, a conversation's later turns included, is
routed when it is sent, from the replicas' state at that moment, by `route_rule.RouteRule` (the
rule `kvplan stress` routes its replicas by).

The engines step in time order (the one whose step ends first runs next); a request is routed once
every engine has reached its send time, so the state it is routed on is that of the steps then
running. A decode stretch never runs past the next send (`Engine.horizon_s`).
"""
from __future__ import annotations

import heapq
from typing import Any

from kvplan.perf.request_state import RequestState
from kvplan.perf.reuse_blocks import link_turns
from kvplan.perf.route_rule import RouteRule
from kvplan.perf.schedule import Engine
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepCost
from kvplan.perf.trace import Trace
from kvplan.workload.request import Request


class Router:
    def __init__(self, policy: str, engines: list[Engine], sessions: dict[int, str]) -> None:
        self.engines, self.sessions = engines, sessions
        self.rule = RouteRule(policy, len(engines))

    @staticmethod
    def load(e: Engine) -> int:
        """Requests routed to `e` and not finished: sent (in its API server or its engine) or not yet."""
        return e.in_flight + len(e.pending)

    def pick(self, r: RequestState) -> Engine:
        i = self.rule.pick(self.sessions.get(r.uid), lambda: [self.load(e) for e in self.engines],
                           lambda: self._kv_costs(r))
        return self.engines[i]

    def _kv_costs(self, r: RequestState) -> list[int]:
        """Each engine's blocks held + blocks its queued requests will want - blocks of `r`'s prompt
        it caches (`r`'s own blocks, the same on every engine, are left out: they choose nothing).
        A full hit still computes the last token, so the last token's block is never looked up."""
        bs = self.engines[0].config.block_size
        usable = (r.known - 1) // bs
        hashes = r.stream.hashes_to(usable)

        def cost(e: Engine) -> int:
            assert e.pool is not None
            queued = sum(-(-q.known // bs) for q in (*e.pending, *e.frontend, *e.held, *e.waiting))
            return e.pool.num_used_blocks + queued - len(e.pool.lookup(hashes, usable))

        return [cost(e) for e in self.engines]


def _busy(e: Engine) -> bool:
    return bool(e.pending or e.later or e.loading or e.frontend or e.waiting or e.held or e.running)


def _due(arrivals: list[Any], released: list[Any], by_s: float) -> list[Any] | None:
    """The queue the next request to send comes from, as one engine's client picks it
    (`Engine.pop_due`): a conversation's released turn first, then the earliest arrival; None:
    nothing is due by `by_s`."""
    if released and released[0][0] <= by_s:
        return released
    return arrivals if arrivals and arrivals[0][0] <= by_s else None


def simulate_routed(requests: list[Request], config: SchedulerConfig, cost: StepCost, replicas: int, policy: str,
                    max_concurrency: int | None = None, frontend_s: float = 0.0,
                    max_steps: int = 5_000_000, watch: Any = None) -> tuple[list[Trace], list[dict[str, Any]]]:
    """Each replica's trace and its share of the routing (requests, prefix-cache hit tokens);
    `watch` (slo_watch.SloWatch, one for every replica's requests) stops the run once the SLO is
    surely missed (the traces are then partial, `extras["missed_slo"]` True). A request that came
    due while every --max-concurrency slot was taken is sent (and timed) when the step that frees
    one ends, as one engine's client sends it."""
    states = [RequestState(r) for r in requests]
    arrivals = [(r.arrival_s, r.uid, r) for r in link_turns(requests, states, config.block_size)]
    heapq.heapify(arrivals)
    released: list[tuple[float, int, RequestState]] = []  # later turns, as the turn before ends
    engines = [Engine([], config, cost, None, frontend_s, watch) for _ in range(replicas)]
    for e in engines:
        e.cap = 1 << 62  # the client's concurrency is the router's to keep (below), not a replica's
        e.on_release = lambda r: heapq.heappush(released, (r.arrival_s, r.uid, r))
    router = Router(policy, engines, {s.uid: q.session_id for s, q in zip(states, requests) if q.session_id})
    steps, now = 0, 0.0  # now: when the last step started (engines step in time order)
    full_s, freed_s = -1.0, 0.0  # when a due request last found every slot taken; when the last step ended
    while arrivals or released or any(_busy(e) for e in engines):
        busy = [e for e in engines if _busy(e)]
        t_engine = min((e.clock for e in busy), default=float("inf"))
        room = max_concurrency is None or sum(router.load(e) for e in engines) < max_concurrency
        queue = _due(arrivals, released, t_engine)
        if queue is not None and room:
            _, _, r = heapq.heappop(queue)
            # held for a client slot: sent as the step that freed one ended; else when due (or as the
            # step it came due in started)
            r.arrival_s = max(r.arrival_s, freed_s if r.arrival_s <= full_s else now)
            router.pick(r).inject(r)
            continue
        if queue is not None:
            full_s = t_engine
        if not busy:  # every slot taken: cannot happen without a busy engine
            raise RuntimeError("routing stalled")
        e = min(busy, key=lambda x: x.clock)
        now = max(now, e.clock)
        e.horizon_s = min(arrivals[0][0] if arrivals else float("inf"),
                          released[0][0] if released else float("inf")) if room else float("inf")
        steps += 1
        if steps > max_steps:
            raise RuntimeError("simulation did not converge")
        if not e.send():
            continue
        if not e.fast_decode():
            e.step()
        freed_s = e.clock
        if e.missed:
            break
    shares = [{"requests": len(e.reqs), "prefix_cache_hits_tokens": e.reuse["hit_tokens"]} for e in engines]
    return [e.trace() for e in engines if e.reqs], shares
