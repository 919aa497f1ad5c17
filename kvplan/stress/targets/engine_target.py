"""The in-process target: the bundled engine, built from the scenario's model and settings.

The engine is built when the target is made, so its pool (blocks measured on the device on CUDA)
is known before the prediction; `run` drives it by the wall clock (`runner.run_engine`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvplan.engine.config import Allocator
from kvplan.errors import KvplanError
from kvplan.results.result import collect_environment
from kvplan.stress.runner import EngineRun, run_engine
from kvplan.stress.scenario import Scenario
from kvplan.stress.target import Pool, TargetRun
from kvplan.workload.request import Request


def build_engine(scenario: Scenario, allocator: Allocator | None = None) -> Any:
    """An `LLMEngine` for the scenario's model (with its overrides) and engine settings."""
    from kvplan.engine.llm_engine import LLMEngine

    config = replace(scenario.engine, allocator=allocator) if allocator else scenario.engine
    return LLMEngine.from_model(scenario.model.name, config, seed=scenario.seed, overrides=scenario.model.overrides)


def measured_memory(run: EngineRun, engines: list[Any]) -> dict[str, Any]:
    """The run's memory and scheduling figures, named as the prediction names them (replicas: the
    pool figures and counters sum them; `num_gpu_blocks` is each one's, as its start-up logs it)."""
    tl = run.timeline
    engine = engines[0]
    peak = max((s.kv_bytes_used or 0 for s in tl), default=0)
    return {
        "num_gpu_blocks": engine.num_gpu_blocks,
        "kv_pool_bytes": sum(e.num_gpu_blocks * e.bytes_per_block for e in engines),
        "bytes_per_block": engine.bytes_per_block,
        "peak_kv_bytes": peak,
        "peak_kv_blocks": peak // engine.bytes_per_block,
        "peak_running_requests": max((s.running or 0 for s in tl), default=0),
        "num_preemptions": tl[-1].preemptions if tl else 0,
        "preemption_onset_s": run.first_preemption_s,
        "preemption_onset_step": run.first_preemption_step,
        "prefix_hit_tokens": tl[-1].prefix_hit_tokens if tl else 0,
        "prefix_cache_evicted_blocks": (tl[-1].evicted_blocks or 0) if tl else 0,
        "external_prefix_hit_tokens": (tl[-1].cpu_hit_tokens or 0) if tl else 0,  # its CPU tier's
        "computed_prompt_tokens": (tl[-1].computed_prompt_tokens or 0) if tl else 0,
        "peak_rss_bytes": max((s.rss_bytes or 0 for s in tl), default=None) or None,
        "peak_cuda_allocated_bytes": max((s.cuda_max_allocated_bytes or 0 for s in tl), default=0) or None,
        "peak_nvml_used_bytes": max((s.nvml_used_bytes or 0 for s in tl), default=0) or None,
        "num_steps": run.num_steps,
        "mean_tokens_per_step": (
            sum(getattr(s, "num_scheduled_tokens", 0) or 0 for s in tl) / run.num_steps if run.num_steps else None
        ),
    }


class EngineTarget:
    """The bundled engine with one allocator (paged or contiguous); one engine per replica."""

    def __init__(self, scenario: Scenario, allocator: Allocator = "paged") -> None:
        self.allocator = allocator
        self.label = f"({allocator})"
        config = scenario.engine
        if scenario.replicas > 1 and config.is_cuda and config.kv_cache_memory_bytes is None \
                and config.num_gpu_blocks_override is None:
            raise KvplanError(f"replicas: {scenario.replicas} on one GPU: set engine.kv_cache_memory_bytes (each "
                              "replica's pool); gpu_memory_utilization would give each replica the whole device")
        self.engines = [build_engine(scenario, allocator) for _ in range(scenario.replicas)]
        self.engine = self.engines[0]
        self.device_name: str | None = None
        if self.engine.config.is_cuda:
            import torch

            self.device_name = torch.cuda.get_device_name(self.engine.config.device)

    def pool(self) -> Pool:
        return Pool(self.engine.num_gpu_blocks, self.engine.bytes_per_block)

    def run(self, scenario: Scenario, requests: list[Request], on_progress: Callable[[int], None]) -> TargetRun:
        run = run_engine(self.engines, scenario, requests, on_progress=on_progress)
        config = self.engine.config
        return TargetRun(records=run.records, timeline=run.timeline, memory=measured_memory(run, self.engines),
                         environment=collect_environment(device=config.device, device_name=self.device_name,
                                                         threads=self.engine.runner.threads),
                         complete=run.complete, notes=[run.nvml_error] if run.nvml_error else [],
                         step_shapes=run.step_shapes, step_times_s=run.step_cycle_s, cpu_s=run.cpu_s, wall_s=run.wall_s,
                         reference=run.reference)
