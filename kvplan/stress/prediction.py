"""The prediction made before a stress run: pool size from the planner, then the scenario
simulated on the engine's scheduler with a per-step cost model (`simulate.py`; CPU: the
calibrated `cpu_cost`, GPU: `perf.gpu_cost`, the model `kvplan predict` uses).

Predicted latency figures go through the same metric code as measured ones, so the two tables
line up key for key.
"""
from __future__ import annotations

from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.perf.cost_models import step_cost
from kvplan.perf.step_cost import StepCost
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.kv import blocks_in_budget
from kvplan.results.figures import FIGURES
from kvplan.results.metrics import compute_metrics
from kvplan.results.record import RequestRecord
from kvplan.spec.gpu import load_gpu
from kvplan.stress.calibrate import find_calibration
from kvplan.stress.cpu_cost import LinearCostModel
from kvplan.stress.scenario import Scenario
from kvplan.stress.simulate import SimResult, simulate_engine
from kvplan.workload.arrivals import ClosedLoop
from kvplan.workload.request import Request

# predicted figures that come out of the simulated requests' records (the rest: from the simulation)
CLOCK_DEPENDENT = ("peak_kv_bytes", "peak_kv_blocks", "peak_running_requests", "num_preemptions",
                   "preemption_onset_step", "prefix_hit_tokens", "num_steps")
PREDICTED_FROM_RECORDS = tuple(
    f.name for f in FIGURES.values() if f.predicted and f.group != "memory" and not f.prediction_key
)


def load_cost_model(scenario: Scenario, calibration: Path | None = None, device_name: str | None = None,
                    perf_model: str = "roofline") -> tuple[StepCost | None, str]:
    """(cost model, how it was chosen). CPU: the calibration file; CUDA: the step cost `kvplan
    predict` builds (kvplan.perf.cost_models.step_cost, `perf_model`) for the GPU named
    `device_name` (as `torch.cuda.get_device_name` gives it; the target knows it)."""
    device = scenario.engine.device
    if calibration is not None:
        return LinearCostModel.load(calibration), f"calibrated: {calibration}"
    if device.startswith("cuda") or device_name is not None:  # a GPU here, or a --target server's (--gpu)
        return _gpu_cost(scenario, device_name, perf_model)
    for name in (scenario.name, scenario.model_spec().name):
        path = find_calibration(name, device)
        if path is not None:
            return LinearCostModel.load(path), f"calibrated: {path.name}"
    return None, (f"no calibration for scenario {scenario.name} or model {scenario.model_spec().name} on {device}; "
                  f"run `kvplan calibrate --scenario ...`")


def _gpu_cost(scenario: Scenario, device_name: str | None, perf_model: str) -> tuple[StepCost | None, str]:
    if device_name is None:
        return None, "no GPU cost model: the GPU's name is unknown"
    name = device_name.lower().replace(" ", "-")
    try:
        gpu = load_gpu(name)
        args = EngineArgs.from_flags(gpu=gpu, dtype=scenario.engine.compute_dtype(),
                                     kv_cache_dtype=scenario.kv_cache_dtype_name())
        model = step_cost(scenario.model_spec(), args, perf_model=perf_model)
    except KvplanError as exc:
        return None, f"no GPU cost model for {name!r}: {exc}"
    return model, f"GPU step cost (kvplan predict's, --perf-model {perf_model}): {gpu.name}"


def _records(sim: SimResult, requests: list[Request]) -> list[RequestRecord]:
    warm = {r.request_id for r in requests if r.is_warmup}
    return [RequestRecord(request_id=r.request_id, class_name=r.class_name, arrival_s=r.arrival_s,
                          first_token_s=r.first_token_s, token_times_s=r.token_times_s, finish_s=r.token_times_s[-1],
                          prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens, is_warmup=r.request_id in warm)
            for r in sim.records]


def predict_run(scenario: Scenario, requests: list[Request], *, num_gpu_blocks: int, bytes_per_block: int,
            cost_model: StepCost | None, cost_source: str, allocator: str) -> dict[str, Any]:
    """The stored prediction: memory figures always; latency figures when a cost model exists."""
    # memory and preemption do not depend on the clock for closed loops or bursts; a unit cost
    # keeps the step order when no model exists
    model = cost_model or LinearCostModel(1e-3, 0.0, 0.0, 0.0, 0.0)
    sim = _simulate(scenario, requests, num_gpu_blocks, bytes_per_block, model, allocator)
    out: dict[str, Any] = {
        "allocator": allocator, "num_gpu_blocks": num_gpu_blocks, "kv_pool_bytes": sim.kv_cache_bytes,
        "bytes_per_block": bytes_per_block, "peak_kv_bytes": sim.peak_kv_bytes,
        "peak_kv_blocks": sim.peak_kv_bytes // bytes_per_block, "peak_running_requests": sim.max_running,
        "num_preemptions": sim.num_preemptions, "preemption_onset_step": sim.first_preemption_step,
        "prefix_hit_tokens": sim.timeline[-1].prefix_hit_tokens if sim.timeline else 0,
        "prefix_cache_evicted_blocks": sim.evicted_blocks,
        "external_prefix_hit_tokens": sim.cpu_hit_tokens,
        "computed_prompt_tokens": sim.computed_prompt_tokens,
        "num_steps": sim.num_steps, "cost_model_source": cost_source,
        "cost_model": ({"kind": type(cost_model).__name__, **asdict(cost_model)} if is_dataclass(cost_model) else None),
    }
    if cost_model is None and scenario.arrival.type != "concurrency" and any(r.arrival_s for r in requests):
        # open-loop arrivals without a cost model: which requests overlap depends on the step time,
        # so the schedule and the peak are unknown, not what a 1 ms unit step would give
        out.update(dict.fromkeys(CLOCK_DEPENDENT))
    if cost_model is not None:
        out.update(_timing(scenario, requests, sim))
    out["timeline"] = [asdict(s) for s in _thin(sim.timeline)]
    return out


def rescaled_timing(scenario: Scenario, requests: list[Request], prediction: dict[str, Any],
                    cost_model: StepCost) -> dict[str, Any]:
    """The prediction's time figures again, on the pool `prediction` was made for, with another
    cost model (machine_speed.SpeedResampled: the calibrated model at the speed this run measured)."""
    sim = _simulate(scenario, requests, prediction["num_gpu_blocks"], prediction["bytes_per_block"], cost_model,
                    prediction["allocator"])
    return _timing(scenario, requests, sim)


def _simulate(scenario: Scenario, requests: list[Request], num_gpu_blocks: int, bytes_per_block: int,
              cost_model: StepCost, allocator: str) -> SimResult:
    engine = scenario.engine
    arrival = scenario.arrival
    return simulate_engine(
        requests,
        num_gpu_blocks=num_gpu_blocks,
        bytes_per_block=bytes_per_block,
        block_size=engine.block_size,
        max_model_len=scenario.max_model_len,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        cost_model=cost_model,
        allocator=allocator,
        enable_prefix_caching=engine.enable_prefix_caching,
        concurrency=arrival.concurrency if isinstance(arrival, ClosedLoop) else None,
        max_in_flight=None if isinstance(arrival, ClosedLoop) else arrival.max_concurrency,
        num_cpu_blocks=blocks_in_budget(engine.swap_space_bytes, bytes_per_block),
        num_tier_blocks=blocks_in_budget(engine.kv_offloading_bytes, bytes_per_block) if engine.enable_prefix_caching
        else 0,
        replicas=scenario.replicas,
        router=scenario.router,
    )


def _timing(scenario: Scenario, requests: list[Request], sim: SimResult) -> dict[str, Any]:
    metrics = compute_metrics(_records(sim, requests), scenario.slo)
    return {**{k: metrics.get(k) for k in PREDICTED_FROM_RECORDS},
            "preemption_onset_s": sim.first_preemption_s, "duration_s": sim.duration_s}


THINNED_FIELDS = ("kv_bytes_used", "running", "waiting")  # the curves the report draws from a prediction


def _thin(samples: list, limit: int = 2000) -> list:
    """At most ~`limit` samples for the report: per equal slice of simulated time, the samples with
    the least and the most of each drawn curve (KV in use, running, waiting: so no predicted peak
    or queue is lost), plus the first and last."""
    if len(samples) <= limit:
        return samples
    n = max(1, limit // (2 * len(THINNED_FIELDS)))
    t0, t1 = samples[0].t_s, samples[-1].t_s
    width = (t1 - t0) / n or 1.0
    extremes: dict[tuple[int, str], tuple[int, int]] = {}
    for i, s in enumerate(samples):
        b = min(int((s.t_s - t0) / width), n - 1)
        for name in THINNED_FIELDS:
            lo, hi = extremes.get((b, name), (i, i))
            v = getattr(s, name)
            extremes[(b, name)] = (
                lo if getattr(samples[lo], name) <= v else i,
                hi if getattr(samples[hi], name) >= v else i,
            )
    keep = {0, len(samples) - 1, *(i for pair in extremes.values() for i in pair)}
    return [samples[i] for i in sorted(keep)]
