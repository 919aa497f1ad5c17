"""Fit the global `Coefficients` on published runs (`published_runs.read_cases`) and score them.

Each case is simulated once with vLLM's scheduling. Without timed arrivals and without an API-server
queue the step sequence does not depend on step durations, so every trial set of coefficients
re-times the stored traces with numpy (`Timings.retimed`); with them, the fit re-times the sequence
simulated with its starting coefficients and the score re-simulates (`fit_frontend` chooses the
API server's time per request on a grid for that reason). The objective is the sum of absolute
log errors of output throughput, mean TPOT and mean TTFT (a median-seeking, scale-free loss),
minimized by Nelder-Mead over the logarithms of the coefficients (logits for efficiencies, which
stay in (0, 1)). The vLLM runs sent all at once are fitted; the others (SGLang, rate 16) are
predicted and scored apart.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from published_runs import Case, Skipped

from kvplan.errors import KvplanError
from kvplan.perf.bench_metrics import Timings
from kvplan.perf.cost_models import step_cost
from kvplan.perf.gpu_cost import Coefficients, GpuStepModel
from kvplan.perf.predict import check_requests, scheduler_config, server_plan
from kvplan.perf.schedule import simulate
from kvplan.perf.step_cost import StepShape
from kvplan.perf.trace import Trace
from kvplan.plan.engine_args import EngineArgs
from kvplan.workload.datasets.random_dataset import RandomDataset
from kvplan.workload.prefix_cache import with_hit_rate

FITTED = (
    "hbm_efficiency",
    "gemm_efficiency",
    "kv_efficiency",
    "attention_efficiency",
    "allreduce_latency_s",
    "link_efficiency",
    "step_overhead_s",
    "legacy_step_overhead_s",
    "legacy_seq_overhead_s",
    "request_latency_s",
)
TTFT_WEIGHT = 1.0  # TTFT of an all-at-once burst is mostly queueing: it checks the scheduling, not only the GPU


@dataclass
class Prepared:
    case: Case
    model: GpuStepModel
    trace: Trace
    replay: Callable[[Coefficients], Timings]  # timings under other coefficients (re-simulated if timed)
    retime: Callable[[Coefficients], Timings]  # the recorded step sequence re-timed (exact if not timed)

    @property
    def fittable(self) -> bool:
        return self.case.engine == "vllm" and math.isinf(self.case.request_rate)


def _shape(t: Any) -> StepShape:
    """Every step of a trace as one shape of arrays, re-timed at once."""
    return StepShape(t.step_tokens, t.step_seqs, t.step_context_tokens, t.step_attention_pairs, t.step_prefill_tokens,
                     t.step_sampled)


class _UnitStep:
    """Every step one second: the schedule of a rate-inf case does not depend on step durations."""

    def step_s(self, shape: StepShape) -> float:
        return 1.0


_unit_step = _UnitStep()


def prepare(case: Case, coefficients: Coefficients | None = None) -> Prepared | Skipped:
    """Simulate one case's scheduling with `coefficients` (default: the stored ones), or say why
    it cannot be represented."""
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    try:
        spec = load_model(case.model)
        args = EngineArgs(
            gpu=load_gpu(case.gpu),
            gpu_memory_utilization=case.gpu_memory_utilization,
            kv_cache_memory_bytes=case.kv_cache_memory_bytes,
            tensor_parallel_size=case.tp,
            quantization=case.quantization,
            max_model_len=case.max_model_len,
            max_num_seqs=case.max_num_seqs,
            max_num_batched_tokens=case.max_num_batched_tokens,
            vllm_version=case.vllm_version,
        )
        plan = server_plan(spec, args)
        config = scheduler_config(
            plan, case.kv_cache_tokens // plan.block_size_tokens if case.kv_cache_tokens else None
        )
        requests = RandomDataset(case.input_len, case.output_len, 0.0, case.num_prompts, case.request_rate,
                                 max_concurrency=case.max_concurrency,
                                 client="sglang" if case.engine == "sglang" else "vllm").requests()
        if case.prefix_hit_rate:
            requests = with_hit_rate(requests, case.prefix_hit_rate, plan.block_size_tokens)
        check_requests(requests, plan, config.num_gpu_blocks)
        model = step_cost(spec, args, coefficients)
    except KvplanError as exc:
        return Skipped(case.row, case.source, str(exc))
    frontend_s = model.coefficients.frontend_request_s
    timed = not math.isinf(case.request_rate) or frontend_s > 0
    trace = simulate(requests, config, model if timed else _unit_step, max_concurrency=case.max_concurrency,
                     frontend_s=frontend_s)

    def retime(c: Coefficients) -> Timings:
        m = replace(model, coefficients=c)
        t = trace
        return Timings.retimed(t, m.step_s(_shape(t)), c.request_latency_s)

    def replay(c: Coefficients) -> Timings:
        m = replace(model, coefficients=c)
        if timed:
            return Timings.of(simulate(requests, config, m, max_concurrency=case.max_concurrency,
                                       frontend_s=c.frontend_request_s), c.request_latency_s)
        t = trace
        return Timings.retimed(t, m.step_s(_shape(t)), c.request_latency_s)

    return Prepared(case, model, trace, replay, retime)


def errors_pct(p: Prepared, c: Coefficients) -> dict[str, float | None]:
    """Signed % errors (predicted vs published) of output throughput, mean TPOT and mean TTFT."""
    thr, tpot_s, ttft_s = p.replay(c).headline()
    case = p.case
    out: dict[str, float | None] = {
        "pred_output_tok_s": thr,
        "pred_tpot_ms": tpot_s * 1e3,
        "pred_ttft_ms": ttft_s * 1e3,
    }
    out["err_output_tok_s"] = 100 * (thr / case.output_tok_s - 1)
    out["err_tpot"] = 100 * (tpot_s * 1e3 / case.mean_tpot_ms - 1) if case.mean_tpot_ms else None
    out["err_ttft"] = 100 * (ttft_s * 1e3 / case.mean_ttft_ms - 1) if case.mean_ttft_ms else None
    return out


def _loss(cases: list[Prepared], c: Coefficients, exact: bool = False) -> float:
    """With a frontend time the step sequence depends on the clock: the fit re-times the sequence
    simulated with its starting coefficients (`exact=False`), the score re-simulates."""
    total = 0.0
    for p in cases:
        thr, tpot_s, ttft_s = (p.replay(c) if exact else p.retime(c)).headline()
        total += abs(math.log(max(thr, 1e-9) / p.case.output_tok_s))
        if p.case.mean_tpot_ms and tpot_s > 0:
            total += abs(math.log(tpot_s * 1e3 / p.case.mean_tpot_ms))
        if p.case.mean_ttft_ms and ttft_s > 0:
            total += TTFT_WEIGHT * abs(math.log(ttft_s * 1e3 / p.case.mean_ttft_ms))
    return total


def _to_x(c: Coefficients) -> np.ndarray:
    vals = asdict(c)
    return np.array(
        [math.log(vals[k] / (1 - vals[k])) if k.endswith("efficiency") else math.log(vals[k]) for k in FITTED]
    )


def _from_x(x: np.ndarray, base: Coefficients) -> Coefficients:
    vals = {k: (1 / (1 + math.exp(-v)) if k.endswith("efficiency") else math.exp(v)) for k, v in zip(FITTED, x)}
    return replace(base, **vals)


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5, iterations: int = 1500,
                tol: float = 1e-6) -> np.ndarray:
    """Derivative-free minimization (the loss is piecewise smooth: absolute log errors)."""
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol * (1 + abs(values[0])):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best point
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (s - simplex[0]) for s in simplex[1:]]
                values = [values[0]] + [f(s) for s in simplex[1:]]
    return simplex[int(np.argmin(values))]


# Pull toward the datasheet-style priors (Coefficients' defaults), per squared log (logit) unit: a
# coefficient the rows cannot pin (PCIe all-reduce when no row runs TP over PCIe) stays physical
# instead of wandering to 13 s of latency; one the rows do pin moves as before (each row's |log
# error| weighs 1). Chosen by leave-one-source-out on the calibration file: 0.05 took the pooled
# held-out medians from 22.8 / 29.3 / 36.4% to 17.3 / 20.8 / 38.9% (output tok/s, TPOT, TTFT).
PRIOR_WEIGHT = 0.05


def fit(cases: list[Prepared], start: Coefficients | None = None, iterations: int = 1500) -> Coefficients:
    """The coefficients minimizing the loss over the fittable cases, held near the priors."""
    usable = [p for p in cases if p.fittable]
    if not usable:
        raise KvplanError("no fittable calibration rows (vLLM runs without timed arrivals)")
    base = start or Coefficients()
    x, prior = _to_x(base), _to_x(Coefficients())

    def objective(v: np.ndarray) -> float:
        return _loss(usable, _from_x(v, base)) + PRIOR_WEIGHT * float(np.sum((v - prior) ** 2))

    for _ in range(2):  # a restart escapes a collapsed simplex
        x = nelder_mead(objective, x, iterations=iterations)
    return _from_x(x, base)


def fit_frontend(cases: list[Case], grid: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02), iterations: int = 800,
                 start: Coefficients | None = None) -> tuple[Coefficients, list[Prepared]]:
    """The API server's per-request time changes the step sequence, so it is chosen on a grid:
    for each value the cases are simulated, the other coefficients fitted, the result scored by
    re-simulation; the best (coefficients, its prepared cases) wins."""
    best: tuple[float, Coefficients, list[Prepared]] | None = None
    for frontend_s in grid:
        begin = replace(start or Coefficients(), frontend_request_s=frontend_s)
        prepared = [p for p in (prepare(c, begin) for c in cases) if isinstance(p, Prepared)]
        found = fit(prepared, start=begin, iterations=iterations)
        score = _loss([p for p in prepared if p.fittable], found, exact=True)
        if best is None or score < best[0]:
            best = (score, found, prepared)
    assert best is not None
    return best[1], best[2]
