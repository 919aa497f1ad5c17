"""`kvplan plan`: which GPU x tensor parallelism (for a MoE model also attention data parallelism
with expert parallelism, within one 8-GPU node) x KV dtype x weight quantization serves a workload
within latency SLOs, how much load one replica sustains inside them (goodput), and how many
replicas the requested rate needs. Every candidate is a `predict` (planned KV pool, simulated
scheduling, GPU cost model); the search keeps few simulations per candidate so it answers in seconds.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kvplan.errors import KvplanError
from kvplan.perf.bench_metrics import Timings
from kvplan.perf.cost_models import step_cost
from kvplan.perf.gpu_cost import Coefficients
from kvplan.perf.predict import check_requests, scheduler_config, simulate_replicas
from kvplan.perf.slo_watch import SloWatch
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.search import planned_serve_line
from kvplan.results.slo import Slo
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec
from kvplan.spec.prices import GpuPrice
from kvplan.workload.datasets.random_dataset import RandomDataset

DEFAULT_GPUS = ("h100-sxm-80gb", "h200-sxm-141gb", "a100-sxm4-80gb", "l40s", "l4", "b200-sxm-180gb")
TP_CHOICES = (1, 2, 4, 8)
DP_CHOICES = (2, 4, 8)  # a MoE model's attention replicas in one server (with --enable-expert-parallel)
NODE_GPUS = 8  # DP x TP within one HGX/DGX node: kvplan does not time links between nodes
SEARCH_PROMPTS = 150  # requests per goodput probe: enough for a P99, few enough for seconds
BISECTIONS = 5  # 64x bracket -> within 14% of the goodput
TRICKLE_RATE = 0.05  # req/s: nearly idle, the best latency a configuration can give


@dataclass(frozen=True)
class Probe:
    ttft_ms: float
    tpot_ms: float
    output_tok_s: float

    def meets(self, slo: Slo) -> bool:
        return self.ttft_ms <= (slo.ttft_ms or math.inf) and self.tpot_ms <= (slo.tpot_ms or math.inf)


MISSED = Probe(math.inf, math.inf, 0.0)  # a probe stopped early: its SLO is missed, its figures unknown


@dataclass(frozen=True)
class Candidate:
    gpu: GpuSpec
    tp: int
    kv_cache_dtype: str
    quantization: str | None
    dp: int = 1  # > 1: --data-parallel-size with --enable-expert-parallel (MoE models)


def workload_max_model_len(workload: RandomDataset) -> int:
    """The smallest power of two (>= 2048) that holds the longest request the workload can draw."""
    longest = math.ceil(workload.random_input_len * (1 + workload.random_range_ratio)) + math.ceil(
        workload.random_output_len * (1 + workload.random_range_ratio))
    return max(2048, 1 << (longest - 1).bit_length())


class _Runner:
    """Simulations of one candidate at chosen request rates."""

    def __init__(self, spec: ModelSpec, args: EngineArgs, workload: RandomDataset, coefficients: Coefficients | None,
                 perf_model: str = "roofline"):
        self.plan = plan_capacity(spec, args)
        self.config = scheduler_config(self.plan)
        self.model = step_cost(spec, args, coefficients, perf_model)
        self.workload = workload
        self.dp = args.data_parallel_size

    @property
    def fits(self) -> bool:
        return self.plan.fits and self.plan.num_gpu_blocks > 0

    def probe(self, rate: float, slo: Slo, num_prompts: int = SEARCH_PROMPTS, *, may_stop: bool = False) -> Probe:
        """The SLO percentiles at `rate`; `may_stop`: only whether it meets the SLO matters, so the
        simulation stops once a miss is certain (`MISSED`)."""
        reqs = replace(self.workload, request_rate=rate, num_prompts=num_prompts).requests()
        check_requests(reqs, self.plan, self.config.num_gpu_blocks)
        latency = self.model.coefficients.request_latency_s
        # data-parallel ranks (a MoE model) step in lockstep, as `predict` runs them
        trace = simulate_replicas(reqs, self.config, self.model, self.dp, self.workload.max_concurrency, lockstep=True,
                                  watch=SloWatch.of(slo, latency, reqs) if may_stop else None, record=False)
        if trace.extras.get("missed_slo"):
            return MISSED
        t = Timings.of(trace, self.model.coefficients.request_latency_s)
        tpot = t.tpot_s
        return Probe(float(np.percentile(t.ttft_s, slo.percentile) * 1e3),
                     float(np.percentile(tpot, slo.percentile) * 1e3) if len(tpot) else 0.0, t.headline()[0])


def replica_prompts(num_prompts: int, replicas: int) -> int:
    """Requests one of `replicas` replicas serves of a `num_prompts` benchmark, at least enough for
    a P99 (SEARCH_PROMPTS)."""
    return max(SEARCH_PROMPTS, math.ceil(num_prompts / replicas))


def goodput(runner: _Runner, slo: Slo) -> tuple[float, float, Probe]:
    """(lo, hi): the largest request rate (req/s) one replica serves within the SLO lies between
    them (lo 0: even a trickle misses it), and the probe at the lightest load tried."""
    light = runner.probe(TRICKLE_RATE, slo, num_prompts=20)
    if not light.meets(slo):
        return 0.0, 0.0, light
    saturated = runner.probe(math.inf, slo)
    # no load above the saturated completion rate is sustainable; bisect between it and 1/64 of it
    hi = max(0.1, saturated.output_tok_s / max(runner.workload.random_output_len, 1))
    lo = hi / 64
    if runner.probe(hi, slo, may_stop=True).meets(slo):
        return hi, hi, light
    lo, hi, met = _bisect(runner, slo, lo, hi)
    if not met and not runner.probe(lo, slo, may_stop=True).meets(slo):
        # even 1/64 of saturation misses (a tight SLO): the goodput lies between the trickle that met it and there
        lo, hi, met = _bisect(runner, slo, min(TRICKLE_RATE, lo), lo)
    return lo, hi, light


def _bisect(runner: _Runner, slo: Slo, lo: float, hi: float) -> tuple[float, float, bool]:
    """Geometric bisection of (lo, hi), hi known to miss; True if some probed rate met the SLO."""
    met = False
    for _ in range(BISECTIONS):
        mid = math.sqrt(lo * hi)
        if runner.probe(mid, slo, may_stop=True).meets(slo):
            lo, met = mid, True
        else:
            hi = mid
    return lo, hi, met


def candidates(gpus: list[GpuSpec], kv_dtypes: list[str], quantizations: list[str | None],
               moe: bool = False) -> list[Candidate]:
    """Per GPU, narrowest server first: TP alone, and for a MoE model DP x TP (experts over all of
    them) up to one node, at each width after the TP-only server of that width."""
    widths = [(tp, 1) for tp in TP_CHOICES] + ([(tp, dp) for dp in DP_CHOICES for tp in TP_CHOICES
                                                if tp * dp <= NODE_GPUS] if moe else [])
    widths.sort(key=lambda w: (w[0] * w[1], w[1]))
    return [Candidate(g, tp, kv, q, dp) for g in gpus for tp, dp in widths for kv in kv_dtypes for q in quantizations
            if not (q == "fp8" and not g.fp8_dense_tflops)]  # fp8 weights need fp8 tensor cores to pay off


def _started(spec: ModelSpec, base: EngineArgs, gpus: list[GpuSpec], kv_dtypes: list[str],
             quantizations: list[str | None], max_model_len: int) -> list[EngineArgs]:
    """The candidates' engine arguments that start (planning only, no simulation), in search order."""
    out: list[EngineArgs] = []
    smallest: dict[str, int] = {}
    for cand in candidates(gpus, kv_dtypes, quantizations, moe=bool(spec.moe_shape[0])):
        width = cand.tp * cand.dp
        if width > smallest.get(cand.gpu.name, width) * 2:
            continue  # beyond twice the narrowest server that starts, more replicas beat a wider server for this search
        args = replace(base, gpu=cand.gpu, tensor_parallel_size=cand.tp, kv_cache_dtype=cand.kv_cache_dtype,
                       quantization=cand.quantization, max_model_len=max_model_len, data_parallel_size=cand.dp,
                       enable_expert_parallel=cand.dp > 1)
        try:
            plan = plan_capacity(spec, args)
        except KvplanError:
            continue  # tp does not divide the heads, or the like
        if not (plan.fits and plan.num_gpu_blocks > 0):
            continue
        smallest.setdefault(cand.gpu.name, width)
        out.append(args)
    return out


def _evaluate(spec: ModelSpec, args: EngineArgs, workload: RandomDataset, slo: Slo, coefficients: Coefficients | None,
              price: float | None, perf_model: str = "roofline") -> tuple[bool, dict[str, Any]]:
    """(meets the SLO, row) for one candidate: goodput, then the fewest replicas that meet the SLO
    at the requested rate, probed with the workload's own number of prompts."""
    runner = _Runner(spec, args, workload, coefficients, perf_model)
    assert args.gpu is not None
    good, good_hi, light = goodput(runner, slo)
    row = {"gpu": args.gpu.name, "tp": args.tensor_parallel_size, "dp": args.data_parallel_size,
           "expert_parallel": args.enable_expert_parallel, "kv_cache_dtype": args.kv_cache_dtype,
           "quantization": args.quantization, "goodput_req_per_s": good,
           "vllm_serve": planned_serve_line(spec, args, runner.plan),
           "idle_ttft_ms": light.ttft_ms, "idle_tpot_ms": light.tpot_ms, "num_gpu_blocks": runner.plan.num_gpu_blocks}
    if good <= 0:
        return False, row
    rate = workload.request_rate
    fewest, safe = max(1, math.ceil(rate / good_hi)), max(1, math.ceil(rate / good))  # the bisection's bracket

    def at(replicas: int, may_stop: bool = True) -> Probe:
        # `vllm bench serve` against `replicas` servers behind a round-robin router: each serves its
        # share of the prompts at its share of the rate, over the benchmark's own duration (a
        # single replica with every prompt at rate / replicas would run `replicas` times longer)
        return runner.probe(rate / replicas, slo, num_prompts=replica_prompts(workload.num_prompts, replicas),
                            may_stop=may_stop)

    # the fewest replicas that meet the SLO, by bisection: below `fewest` each replica would carry more
    # than the search saw fail; the safe end can still miss (a longer run than the search's probes
    # queues more), then up to twice it is tried
    replicas, probe = safe, at(safe)
    lo, hi = fewest - 1, safe
    if not probe.meets(slo):
        replicas, probe = 2 * safe, at(2 * safe, may_stop=False)  # reported if it misses: by how much
        lo, hi = safe, 2 * safe
    if probe.meets(slo):
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial = at(mid)
            if trial.meets(slo):
                hi, replicas, probe = mid, mid, trial
            else:
                lo = mid
    at_rate = probe
    gpus = replicas * args.total_gpus
    row.update({"replicas": replicas, "total_gpus": gpus, "ttft_ms": at_rate.ttft_ms,
                "tpot_ms": at_rate.tpot_ms, "usd_per_hour": None if price is None else price * gpus})
    return at_rate.meets(slo), row


def _evaluate_star(job: tuple[Any, ...]) -> tuple[bool, dict[str, Any]]:
    return _evaluate(*job)


def _map(jobs: list[tuple[Any, ...]], workers: int | None) -> list[tuple[bool, dict[str, Any]]]:
    return fork_map(_evaluate_star, jobs, workers)


def fork_map(fn: Callable[[Any], Any], jobs: list[Any], workers: int | None = None) -> list[Any]:
    """Independent simulations spread over the cores this process may use (forked workers, Linux),
    results in order; one core, one job or no fork: in this process."""
    import multiprocessing
    import os

    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    workers = min(workers, len(jobs))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(job) for job in jobs]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.map(fn, jobs, chunksize=1)


def search(spec: ModelSpec, base: EngineArgs, workload: RandomDataset, slo: Slo, gpus: list[GpuSpec], *,
           kv_dtypes: list[str], quantizations: list[str | None], prices: dict[str, GpuPrice] | None = None,
           coefficients: Coefficients | None = None, workers: int | None = None,
           perf_model: str = "roofline") -> dict[str, Any]:
    """Every candidate that starts: its goodput, replicas for the requested rate and predicted
    figures there; the answer lists those meeting the SLO, cheapest first ($/h of all its GPUs;
    GPUs without a price after, by fewest GPUs). `prices`: per GPU name, one GPU-hour.
    `workers`: processes to spread the candidates over (default: the usable cores)."""
    workload.validate()
    prices = prices or {}
    rate = workload.request_rate
    if math.isinf(rate):
        raise KvplanError("kvplan plan needs a finite --request-rate (the load to size for)")
    max_model_len = base.max_model_len or workload_max_model_len(workload)
    started = _started(spec, base, gpus, kv_dtypes, quantizations, max_model_len)
    if not started:
        raise KvplanError(f"{spec.name} does not start on any candidate ({', '.join(g.name for g in gpus)}, tp up to "
                          f"{max(TP_CHOICES)}) at max_model_len {max_model_len}")
    jobs = [
        (
            spec,
            args,
            workload,
            slo,
            coefficients,
            p.usd_per_hour if args.gpu and (p := prices.get(args.gpu.name)) else None,
            perf_model,
        )
        for args in started
    ]
    met: list[dict[str, Any]] = []
    missed: list[dict[str, Any]] = []
    for ok, row in _map(jobs, workers):
        price = prices.get(row["gpu"])  # one GPU-hour, how it was priced and from which data
        row.update({"usd_per_gpu_hour": price and price.usd_per_hour, "usd_per_hour_source": price and price.basis,
                    "usd_per_hour_dataset": price and (price.dataset or None)})
        (met if ok else missed).append(row)
    met.sort(key=lambda r: (r["usd_per_hour"] if r.get("usd_per_hour") is not None else math.inf, r["total_gpus"],
                            -r["goodput_req_per_s"]))
    return {"model": spec.name, "workload": {"request_rate": rate, "random_input_len": workload.random_input_len,
                                             "random_output_len": workload.random_output_len,
                                             "random_range_ratio": workload.random_range_ratio},
            "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "percentile": slo.percentile},
            "max_model_len": max_model_len, "perf_model": perf_model, "configs": met, "unmet": missed}


def why_unmet(answer: dict[str, Any]) -> str:
    """Which SLO the closest candidate misses, and by how much."""
    slo = answer["slo"]
    rows = answer["unmet"]
    best_ttft = min(rows, key=lambda r: r.get("ttft_ms", r["idle_ttft_ms"]))
    best_tpot = min(rows, key=lambda r: r.get("tpot_ms", r["idle_tpot_ms"]))
    parts = []
    ttft = best_ttft.get("ttft_ms", best_ttft["idle_ttft_ms"])
    tpot = best_tpot.get("tpot_ms", best_tpot["idle_tpot_ms"])
    p = f"P{slo['percentile']:g}"

    def where(r: dict[str, Any]) -> str:
        return f"{r['gpu']} tp{r['tp']}" + (f" dp{r['dp']}" if r.get("dp", 1) > 1 else "")

    if ttft > slo["ttft_ms"]:
        parts.append(
            f"{p} TTFT: best {ttft:.0f} ms on {where(best_ttft)}, "
            f"{ttft - slo['ttft_ms']:.0f} ms ({100 * (ttft / slo['ttft_ms'] - 1):.0f}%) over {slo['ttft_ms']:g} ms"
        )
    if tpot > slo["tpot_ms"]:
        parts.append(
            f"{p} TPOT: best {tpot:.1f} ms on {where(best_tpot)}, "
            f"{tpot - slo['tpot_ms']:.1f} ms ({100 * (tpot / slo['tpot_ms'] - 1):.0f}%) over {slo['tpot_ms']:g} ms"
        )
    return "; ".join(parts) or "the SLOs are met only together at no tested replica count"
