"""`kvplan plan-sessions`: the cheapest way to serve a conversation workload within TTFT and TPOT
limits, over GPU x TP x CPU tier size x replicas (behind one router policy), each candidate one
`predict` of the whole workload:

    for each GPU and TP that starts the model, and each CPU tier size (0: none):
        the fewest replicas (up to max_replicas: doubling, then bisection) whose predicted P99 TTFT
        and TPOT meet the limits; cost = replicas x TP x the GPU's price per hour. A trial that
        misses stops once the miss is certain (more requests over a limit than P99 leaves room
        for): its figures stay unknown, only that it missed
    the answer: the cheapest candidate (a smaller tier first on a tie), and for its GPU, TP and
    replica count the prefix hit rate, CPU hits and P99 TTFT at every tier size: the curve of
    what host memory buys

The host memory a tier uses is not priced (kvplan has no host-memory prices); the answer names it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvplan.errors import KvplanError
from kvplan.perf.capacity import fork_map
from kvplan.perf.predict import predict
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.search import planned_serve_line
from kvplan.results.slo import Slo
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec
from kvplan.spec.prices import GpuPrice
from kvplan.workload.request import Request


@dataclass(frozen=True)
class Trial:
    gpu: str
    tp: int
    tier_gib: float
    replicas: int
    p99_ttft_ms: float | None  # None: stopped once the miss was certain (and its hit figures with it)
    p99_tpot_ms: float | None
    hit_rate: float | None  # the GPU prefix cache's (vLLM's prefix_cache_hits / queries)
    cpu_hit_tokens: int | None
    total_hit_rate: float | None  # GPU and CPU tier together: the prompt tokens not computed
    meets: bool
    usd_per_hour: float | None
    stopped: bool = False  # the simulation stopped at a certain miss

    def row(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _trial(spec: ModelSpec, args: EngineArgs, requests: list[Request], tier: float, replicas: int, router: str,
           slo: Slo, price: GpuPrice | None, perf_model: str, may_stop: bool = True) -> Trial:
    """One whole-workload `predict`; `may_stop`: only whether it meets `slo` matters when it misses."""
    pred = predict(spec, args, requests, perf_model=perf_model, kv_offloading_size_gib=tier or None,
                   replicas=replicas, router=router if replicas > 1 else None, stop_on_miss=slo if may_stop else None)
    f = pred.figures
    usd = None if price is None else price.usd_per_hour * args.tensor_parallel_size * replicas
    if f.get("missed_slo"):
        return Trial(args.gpu.name if args.gpu else "", args.tensor_parallel_size, tier, replicas, None, None, None,
                     None, None, False, usd, stopped=True)
    ttft, tpot = f.get("p99_ttft_ms"), f.get("p99_tpot_ms")
    meets = (ttft is not None and ttft <= (slo.ttft_ms or float("inf"))
             and (tpot is None or tpot <= (slo.tpot_ms or float("inf"))))
    queries = f.get("prefix_cache_queries_tokens") or 0
    cpu = int(f.get("external_prefix_cache_hits_tokens", 0))
    total = (f.get("prefix_cache_hits_tokens", 0) + cpu) / queries if queries else 0.0
    return Trial(args.gpu.name if args.gpu else "", args.tensor_parallel_size, tier, replicas, ttft, tpot,
                 float(f.get("prefix_cache_hit_rate", 0.0)), cpu, float(total), meets, usd)


def _fewest_replicas(spec: ModelSpec, args: EngineArgs, requests: list[Request], tier: float, router: str,
                     slo: Slo, price: GpuPrice | None, perf_model: str, max_replicas: int) -> list[Trial]:
    """The trials of a search for the fewest replicas that meet the limits: 1, 2, 4, ... up to
    max_replicas until one does, then bisection between the last that missed and it (more replicas
    never serve worse)."""
    tried: dict[int, Trial] = {}

    def at(n: int) -> Trial:
        if n not in tried:
            tried[n] = _trial(spec, args, requests, tier, n, router, slo, price, perf_model)
        return tried[n]

    lo, hi = 0, 1  # lo: the most replicas known to miss (0: none tried)
    while not at(hi).meets:
        if hi >= max_replicas:
            return [tried[n] for n in sorted(tried)]
        lo, hi = hi, min(2 * hi, max_replicas)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if at(mid).meets else (mid, hi)
    return [tried[n] for n in sorted(tried)]


def _fewest_star(job: tuple[Any, ...]) -> list[Trial]:
    return _fewest_replicas(*job)


def plan_sessions(spec: ModelSpec, base: EngineArgs, requests: list[Request], slo: Slo, gpus: list[GpuSpec],
                  tps: list[int], tiers_gib: list[float], router: str, max_replicas: int,
                  prices: dict[str, GpuPrice], perf_model: str = "roofline",
                  workers: int | None = None) -> dict[str, Any]:
    """Every trial, the cheapest that meets `slo` (None if none does) and its tier curve; the
    configurations' searches spread over `workers` forked processes (None: the cores this process
    may use)."""
    started, jobs = [], []
    for gpu in gpus:
        for tp in tps:
            args = replace(base, gpu=gpu, tensor_parallel_size=tp)
            plan = plan_capacity(spec, args)
            if not plan.fits or plan.num_gpu_blocks <= 0:
                continue
            started.append((gpu, tp))
            jobs += [(spec, args, requests, tier, router, slo, prices.get(gpu.name), perf_model, max_replicas)
                     for tier in tiers_gib]
    trials = [t for found in fork_map(_fewest_star, jobs, workers) for t in found]
    if not started:
        raise KvplanError(f"{spec.name} starts on none of {', '.join(g.name for g in gpus)} at TP "
                          f"{', '.join(map(str, tps))}")
    meeting = [t for t in trials if t.meets]
    best = min(meeting, key=lambda t: (t.usd_per_hour is None, t.usd_per_hour or t.tp * t.replicas, t.tier_gib),
               default=None)
    curve: list[Trial] = []
    if best is not None:
        args = replace(base, gpu=next(g for g, _ in started if g.name == best.gpu), tensor_parallel_size=best.tp)
        known = {t.tier_gib: t for t in trials
                 if (t.gpu, t.tp, t.replicas) == (best.gpu, best.tp, best.replicas) and not t.stopped}
        curve = [known.get(tier) or _trial(spec, args, requests, tier, best.replicas, router, slo,
                                           prices.get(best.gpu), perf_model, may_stop=False) for tier in tiers_gib]
    answer: dict[str, Any] = {"trials": [t.row() for t in trials], "best": best and best.row(),
                              "curve": [t.row() for t in curve], "router": router,
                              "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "percentile": 99.0}}
    if best is not None:
        args = replace(base, gpu=next(g for g, _ in started if g.name == best.gpu), tensor_parallel_size=best.tp)
        served = plan_capacity(spec, args)
        line = planned_serve_line(spec, served.args, served)
        if best.tier_gib:
            line += f" --kv-offloading-size {best.tier_gib:g} --kv-offloading-backend native"
        answer["vllm_serve"] = line
        answer["note"] = ("host memory for the CPU tier is not priced" if best.tier_gib else None)
    return answer
