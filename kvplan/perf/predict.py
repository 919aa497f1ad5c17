"""`kvplan predict`: the KV pool from vLLM's start-up budget (`plan.budget`), vLLM's scheduling on
a simulated clock (`schedule`), each step timed by the GPU cost model (`cost`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvplan.errors import KvplanError
from kvplan.perf.bench_metrics import bench_figures
from kvplan.perf.cache_kinds import untimed_kinds
from kvplan.perf.cost_models import resolve_perf_model, step_cost
from kvplan.perf.cpu_tier_plan import CpuTierPlan, cpu_tier_plan
from kvplan.perf.gpu_cost import Coefficients
from kvplan.perf.lockstep import simulate_lockstep
from kvplan.perf.schedule import simulate
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.slo_watch import SloWatch
from kvplan.perf.trace import Trace, merge_traces
from kvplan.plan import overheads as oh
from kvplan.plan.budget import CapacityPlan, plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.results.slo import Slo
from kvplan.spec.model import ModelSpec
from kvplan.workload.request import Request

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class Prediction:
    figures: dict[str, Any]  # vLLM's keys, then kvplan's memory keys
    plan: CapacityPlan
    trace: Trace
    scheduler: SchedulerConfig


def scheduler_config(plan: CapacityPlan, num_gpu_blocks: int | None = None,
                     prefix_caching: bool = True, tier: CpuTierPlan | None = None) -> SchedulerConfig:
    """V1 always chunks prefills; V0 only above 32K max_model_len (its default). Prefix caching is
    V1's (V0's was off by default)."""
    chunked = plan.version >= oh.V1_SINCE or plan.max_model_len > 32768
    return SchedulerConfig(num_gpu_blocks=plan.num_gpu_blocks if num_gpu_blocks is None else num_gpu_blocks,
                           block_size=plan.block_size_tokens, max_num_seqs=plan.max_num_seqs,
                           max_num_batched_tokens=plan.max_num_batched_tokens, chunked_prefill=chunked,
                           async_scheduling=plan.args.schedules_async,
                           prefix_caching=prefix_caching and plan.version >= oh.V1_SINCE,
                           cpu_tier_blocks=tier.num_blocks if tier is not None else 0,
                           load_s_per_block=tier.load_s_per_block if tier is not None else 0.0)


def server_plan(spec: ModelSpec, args: EngineArgs) -> CapacityPlan:
    """vLLM's start-up plan, or the start-up error vLLM would print, as one line."""
    if args.gpu is None:
        raise KvplanError("a time prediction needs --gpu NAME (see `kvplan gpus`)")
    plan = plan_capacity(spec, args)
    if not plan.fits or plan.num_gpu_blocks <= 0:
        raise KvplanError(f"{spec.name} does not start on {args.tensor_parallel_size} x {args.gpu.name}: "
                          f"{plan.error or 'no memory left for the KV cache'}")
    return plan


def check_requests(requests: list[Request], plan: CapacityPlan, num_gpu_blocks: int) -> None:
    longest = max(requests, key=lambda r: r.prompt_tokens + r.output_tokens)
    tokens = longest.prompt_tokens + longest.output_tokens
    if tokens > plan.max_model_len:
        raise KvplanError(
            f"a request of {longest.prompt_tokens} + {longest.output_tokens} tokens exceeds "
            f"max_model_len {plan.max_model_len}; vLLM would reject it (raise --max-model-len or shorten the workload)"
        )
    if -(-tokens // plan.block_size_tokens) > num_gpu_blocks:
        raise KvplanError(f"a request of {tokens} tokens needs more than the {num_gpu_blocks} KV blocks of the pool")


def simulate_replicas(requests: list[Request], config: SchedulerConfig, model: Any, dp: int,
                      max_concurrency: int | None, lockstep: bool = False, watch: Any = None,
                      record: bool = True) -> Trace:
    """vLLM's scheduler for each of `dp` engine replicas: requests dealt in turn (vLLM's DP load
    balancer sends each to the least loaded replica; equal requests make that a rotation), the
    client's --max-concurrency shared out; one trace of every replica's requests (the step
    arrays are the first replica's). `lockstep` (a MoE model): the replicas step together, each
    step as long as the slowest replica's (kvplan.perf.lockstep); else each runs on its own.
    `watch`, `record`: as in `schedule.simulate` (a `plan` probe; data-parallel: lockstep only)."""
    frontend_s = model.coefficients.frontend_request_s
    if dp == 1:
        return simulate(requests, config, model, max_concurrency=max_concurrency, frontend_s=frontend_s,
                        watch=watch, record=record)
    dealt = _deal(requests, dp)
    shares = [(dealt[rank], None if max_concurrency is None else
               max(1, max_concurrency // dp + (rank < max_concurrency % dp))) for rank in range(len(dealt))]
    if lockstep:
        return merge_traces(simulate_lockstep(shares, config, model, frontend_s, watch=watch, record=record))
    return merge_traces([simulate(reqs, config, model, max_concurrency=share, frontend_s=frontend_s)
                         for reqs, share in shares])


def _deal(requests: list[Request], dp: int) -> list[list[Request]]:
    """Requests dealt to `dp` replicas in turn; a conversation's turns all go where its first went
    (session affinity: the load balancer does not keep it, so hits across turns are an upper bound)."""
    if not any(r.follows_turn for r in requests):
        return [share for share in (requests[rank::dp] for rank in range(dp)) if share]
    rank_of: dict[str, int] = {}
    shares: list[list[Request]] = [[] for _ in range(dp)]
    first = 0
    for r in requests:
        if r.session_id is not None and r.session_id in rank_of:
            shares[rank_of[r.session_id]].append(r)
            continue
        rank = first % dp
        first += 1
        if r.session_id is not None:
            rank_of[r.session_id] = rank
        shares[rank].append(r)
    return [share for share in shares if share]


def predict(spec: ModelSpec, args: EngineArgs, requests: list[Request], *, max_concurrency: int | None = None,
            coefficients: Coefficients | None = None, num_gpu_blocks: int | None = None,
            perf_model: str = "roofline", explain: bool = False, prefix_caching: bool = True,
            kv_offloading_size_gib: float | None = None, kv_offloading_backend: str = "native",
            replicas: int = 1, router: str | None = None, goodput_ms: dict[str, float] | None = None,
            host_memory_gib: float | None = None, stop_on_miss: Slo | None = None) -> Prediction:
    """Simulate `requests` against vLLM serving `spec` with `args`; `num_gpu_blocks` overrides the
    planned pool (a start-up log's figure); `explain`: figures["explain"] says where the median
    request's TTFT and a decode step's time go (`kvplan.perf.explain`). `stop_on_miss` (a search's
    probe): the simulation stops once this SLO's percentile is surely missed, and the figures are
    then only {"missed_slo": True} (the trace is partial)."""
    if not requests:
        raise KvplanError("no requests to simulate")
    plan = server_plan(spec, args)
    tier = None
    if kv_offloading_size_gib is not None:
        tier = cpu_tier_plan(plan, args, kv_offloading_size_gib, kv_offloading_backend, prefix_caching,
                             host_memory_gib)
    config = scheduler_config(plan, num_gpu_blocks, prefix_caching, tier)
    check_requests(requests, plan, config.num_gpu_blocks)
    model = step_cost(spec, args, coefficients, perf_model)
    routing = check_routing(requests, config, args, replicas, router)
    lockstep = bool(spec.moe_shape[0])
    watch = None if stop_on_miss is None else SloWatch.of(stop_on_miss, model.coefficients.request_latency_s, requests)
    if watch is not None and args.data_parallel_size > 1 and not lockstep:
        raise KvplanError("stop_on_miss with independent data-parallel replicas is not modelled")  # API misuse
    if routing is not None:
        from kvplan.perf.router import simulate_routed

        traces, shares = simulate_routed(requests, config, model, replicas, routing, max_concurrency,
                                         model.coefficients.frontend_request_s, watch=watch)
        trace = merge_traces(traces)
    else:
        trace = simulate_replicas(requests, config, model, args.data_parallel_size, max_concurrency,
                                  lockstep=lockstep, watch=watch)
    if trace.extras.get("missed_slo"):
        return Prediction({"missed_slo": True}, plan, trace, config)
    figures = bench_figures(trace, model.coefficients.request_latency_s, goodput_ms)
    figures.update({
        "num_gpu_blocks": config.num_gpu_blocks, "kv_cache_tokens": config.num_gpu_blocks * config.block_size,
        "max_concurrency": plan.max_concurrency, "max_num_seqs": config.max_num_seqs,
        "max_num_batched_tokens": config.max_num_batched_tokens, "peak_kv_blocks": trace.peak_used_blocks,
        "peak_kv_bytes": trace.peak_used_blocks * plan.block_bytes,
        "peak_kv_usage": trace.peak_used_blocks / max(config.num_gpu_blocks, 1),
        "peak_running_requests": trace.max_running, "num_preemptions": trace.num_preemptions,
        "num_steps": int(len(trace.step_tokens)),
        "perf_model": resolve_perf_model(perf_model, args.gpu.name)[1] if args.gpu is not None else perf_model,
        "step_cost_sources": step_sources(model, spec, args),
        "scheduling": scheduling_note(args, config.async_scheduling),
    })
    figures.update(prefix_cache_figures(trace))
    if routing is not None:
        figures.update(replicas=replicas, router=routing, requests_per_replica=[x["requests"] for x in shares],
                       prefix_cache_hits_tokens_per_replica=[x["prefix_cache_hits_tokens"] for x in shares])
    if tier is not None:
        figures.update(tier.figures())
    if explain:
        from kvplan.perf.explain import explain as explain_trace

        first_replica = -(-len(requests) // args.data_parallel_size)
        found = explain_trace(trace, model, model.coefficients.request_latency_s, first_replica)
        figures["explain"] = found.as_dict() if found is not None else None
    return Prediction(figures, plan, trace, config)


def check_routing(requests: list[Request], config: SchedulerConfig, args: EngineArgs, replicas: int,
                  router: str | None) -> str | None:
    """The router policy to simulate, or None for one replica (vLLM's own data parallelism aside)."""
    from kvplan.perf.reuse_blocks import uses_hashed_pool
    from kvplan.perf.route_rule import POLICIES, check_router

    if router is None:
        if replicas != 1:
            raise KvplanError(f"--replicas {replicas} needs --router ({', '.join(POLICIES)})")
        return None
    check_router(router)
    if replicas < 2:
        raise KvplanError(f"--router {router} routes between replicas: give --replicas 2 or more, got {replicas}")
    if args.data_parallel_size > 1:
        raise KvplanError("--replicas behind a --router and --dp together are not modelled; use one of them")
    if not uses_hashed_pool(requests, config):
        raise KvplanError("--router needs prompts with token ids and prefix caching on "
                          "(--sessions, a --scenario, or vLLM's prefix_repetition dataset)")
    return router


def prefix_cache_figures(trace: Trace) -> dict[str, Any]:
    """vLLM's prefix-cache counters (`vllm:prefix_cache_queries` / `hits`, tokens) as the hashed
    block pool counted them; nothing when the run had no token ids to hash."""
    counts = trace.extras.get("prefix_cache")
    if counts is None:
        return {}
    queries = counts["queries_tokens"]
    out = {
        "prefix_cache_queries_tokens": queries, "prefix_cache_hits_tokens": counts["hit_tokens"],
        "prefix_cache_hit_rate": counts["hit_tokens"] / queries if queries else 0.0,
        "preempted_prefix_cache_queries_tokens": counts["preempted_queries_tokens"],
        "preempted_prefix_cache_hits_tokens": counts["preempted_hit_tokens"],
        "prefix_cache_evicted_blocks": counts["evicted_blocks"],
    }
    if "cpu_hit_tokens" in counts:  # vLLM's vllm:external_prefix_cache_queries / _hits, and the tier's traffic
        out.update({
            "external_prefix_cache_queries_tokens": counts["cpu_queries_tokens"],
            "external_prefix_cache_hits_tokens": counts["cpu_hit_tokens"],
            "cpu_stored_blocks": counts["cpu_stored_blocks"], "cpu_evicted_blocks": counts["cpu_evicted_blocks"],
            "cpu_load_s": counts["load_s"],
        })
    return out


def scheduling_note(args: EngineArgs, async_scheduling: bool) -> str:
    """Which scheduling the simulation ran, and why (the flag, else the version's default)."""
    why = (
        ("--async-scheduling" if args.async_scheduling else "--no-async-scheduling")
        if args.async_scheduling is not None
        else f"vLLM {args.vllm_version}'s default"
    )
    if async_scheduling:
        return f"async: a request reaching a busy engine first runs one step later ({why})"
    return f"sync: each step is scheduled after the last one ends ({why})"


def step_sources(model: Any, spec: ModelSpec, args: EngineArgs) -> dict[str, str]:
    """What each op was timed from, and what the step leaves out that a user would otherwise assume."""
    sources = dict(getattr(model, "sources", {}) or {"all ops": "roofline (datasheet, kvplan's global coefficients)"})
    untimed = untimed_kinds(spec)
    if untimed:
        sources["cache_kinds"] = untimed
    if args.data_parallel_size > 1 and spec.moe_shape[0]:
        # measured: on the attention-DP configurations of AIConfigurator's vLLM silicon rows
        # (MiniMax-M2.5, Kimi-K2.5 on B200/B300) the kernel model's TPOT reads 17% under (median,
        # lockstep and the NCCL exchange included); MiniMax-M2.5 TP2+DP2 decodes no faster than TP2
        # alone at the same total concurrency, where this model reads each GPU's experts in half
        sources["data_parallel"] = (f"{args.data_parallel_size} replicas step in lockstep through the MoE layers: "
                                    "each step lasts as long as the slowest replica's (its batch padded to the "
                                    "largest). Not modeled: vLLM's per-step DP coordination. On measured vLLM DP "
                                    "runs this decode time is optimistic (docs/benchmarks.md)")
    return sources
