"""Drive the in-process engine with a scenario's request stream, by the wall clock.

Open loop: each request is submitted when its `arrival_s` comes due (seconds after the run
start); between arrivals an idle engine sleeps. Closed loop: the runner keeps the allowed number
of requests open, topping up between engine steps, so the scheduling (and so the memory figures)
depends on token counts only. Every step appends a timeline sample: KV bytes in use and pool size
from the engine, queue lengths and counters, process RSS and, on CUDA, the allocator's figures.
Ctrl-C stops the loop; what was measured so far is returned with `complete=False`.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kvplan.report.result import TimelineSample
from kvplan.stress.memory import NvmlSampler, cuda_bytes, rss_bytes
from kvplan.stress.record import RequestRecord
from kvplan.stress.scenario import Scenario
from kvplan.stress.workload import RequestSpec, concurrency_limit


@dataclass
class EngineRun:
    records: list[RequestRecord] = field(default_factory=list)
    timeline: list[TimelineSample] = field(default_factory=list)
    step_shapes: list[object] = field(default_factory=list)  # StepShape per step
    step_times_s: list[float] = field(default_factory=list)
    complete: bool = True
    num_steps: int = 0
    first_preemption_s: float | None = None
    first_preemption_step: int | None = None
    nvml_error: str | None = None


def build_engine(scenario: Scenario, allocator: str | None = None) -> object:
    """An `LLMEngine` for the scenario's model and engine settings (random weights for profiles,
    real weights for a local model directory)."""
    from dataclasses import replace
    from pathlib import Path

    import torch

    from kvplan.engine import LLMEngine
    from kvplan.engine.model_runner import random_model
    from kvplan.spec.profiles import model_index, model_profile

    config = scenario.engine_config()
    if allocator:
        config = replace(config, allocator=allocator)
    ref = scenario.model
    known = ref.name.lower() in model_index()
    if known and not ref.overrides:
        return LLMEngine.from_profile(ref.name, config, seed=scenario.seed)
    path = Path(ref.name).expanduser()
    if not known and path.is_dir() and any(path.glob("*.safetensors")) and not ref.overrides:
        return LLMEngine.from_pretrained(path, config)
    hf = dict(model_profile(ref.name)["config"]) if known else {}
    if not known:
        from kvplan.spec.model import load_config_json

        hf = load_config_json(path / "config.json" if path.is_dir() else path)
    hf.update(ref.overrides or {})
    dtype = torch.float32 if not config.is_cuda and config.dtype == "auto" else getattr(torch, scenario.engine.compute_dtype())
    model = random_model(hf, dtype, scenario.seed)
    return LLMEngine(model, config, spec=scenario.model_spec())


def _sample(engine: object, t_s: float, shape: object, nvml: NvmlSampler | None) -> TimelineSample:
    stats = engine.stats  # type: ignore[attr-defined]
    allocated, peak = cuda_bytes()
    return TimelineSample(
        t_s=t_s, kv_bytes_used=stats.kv_bytes_in_use, kv_pool_bytes=stats.kv_cache_bytes,
        kv_blocks_used=stats.num_blocks_used, running=stats.num_running, waiting=stats.num_waiting,
        swapped=stats.num_swapped, preemptions=stats.total_preemptions,
        prefix_hit_tokens=stats.total_prefix_hit_tokens, rss_bytes=rss_bytes(),
        cuda_allocated_bytes=allocated, cuda_max_allocated_bytes=peak,
        nvml_used_bytes=nvml.samples[-1][1] if nvml is not None and nvml.samples else None,
        num_scheduled_tokens=stats.num_scheduled_tokens, step_time_s=stats.step_time_s,
        # the batch's shape, so the cost model can be checked step by step against this run
        num_scheduled_seqs=shape.num_seqs, context_tokens=shape.context_tokens,  # type: ignore[attr-defined]
        attention_pairs=shape.attention_pairs,  # type: ignore[attr-defined]
    )


def _warm_up(engine: object) -> None:
    """One short request before the clock starts: the first forward pays one-off costs (kernel
    selection, allocator growth) that are not part of serving and that the prediction leaves out."""
    from kvplan.engine import SamplingParams

    vocab = engine.vocab_size  # type: ignore[attr-defined]
    engine.generate([[3 + i % (vocab - 3) for i in range(24)]],  # type: ignore[attr-defined]
                    SamplingParams(max_tokens=2, ignore_eos=True, temperature=0.0))


def run_engine(engine: object, scenario: Scenario, requests: Iterable[RequestSpec], *,
               on_progress: Callable[[int], None] | None = None, max_duration_s: float | None = None) -> EngineRun:
    """Run `requests` through `engine` by the wall clock; see the module doc."""
    from kvplan.engine import SamplingParams
    from kvplan.stress.step_probe import StepProbe

    probe = StepProbe(engine)
    run = EngineRun()
    closed = scenario.arrival.type == "concurrency"
    stream: Iterator[RequestSpec] = iter(requests)
    upcoming: RequestSpec | None = next(stream, None)
    live: dict[str, tuple[RequestSpec, float]] = {}  # request id -> (spec, arrival on the run clock)
    duration = max_duration_s if max_duration_s is not None else scenario.duration_s
    _warm_up(engine)
    # device memory as the driver sees it, from a sampler thread (CUDA only; None where NVML is missing)
    nvml = NvmlSampler().start() if engine.config.is_cuda else None  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    done = 0

    def now() -> float:
        return time.perf_counter() - t0

    def submit(spec: RequestSpec, arrival_s: float) -> None:
        engine.add_request(list(spec.prompt_token_ids),  # type: ignore[attr-defined]
                           SamplingParams(max_tokens=spec.output_tokens, ignore_eos=True, temperature=0.0, seed=spec.index),
                           request_id=spec.request_id, arrival_time_s=t0 + arrival_s)
        live[spec.request_id] = (spec, arrival_s)

    try:
        while upcoming is not None or engine.has_unfinished_requests():  # type: ignore[attr-defined]
            t = now()
            stop_arrivals = duration is not None and t >= duration
            if closed:
                while upcoming is not None and not stop_arrivals and len(live) < concurrency_limit(scenario.arrival, t):
                    submit(upcoming, t)
                    upcoming = next(stream, None)
            else:
                while upcoming is not None and not stop_arrivals and (upcoming.arrival_s or 0.0) <= t:
                    submit(upcoming, upcoming.arrival_s or 0.0)
                    upcoming = next(stream, None)
            if stop_arrivals:
                upcoming = None
            if not engine.has_unfinished_requests():  # type: ignore[attr-defined]
                if upcoming is not None and not closed:
                    time.sleep(max(0.0, min((upcoming.arrival_s or 0.0) - now(), 0.05)))
                continue
            outputs = engine.step()  # type: ignore[attr-defined]
            run.num_steps += 1
            stats = engine.stats  # type: ignore[attr-defined]
            run.step_shapes.append(probe.last)
            run.step_times_s.append(stats.step_time_s)
            if stats.num_preemptions and run.first_preemption_s is None:
                run.first_preemption_s, run.first_preemption_step = stats.time_s - t0, run.num_steps
            run.timeline.append(_sample(engine, stats.time_s - t0, probe.last, nvml))
            for out in outputs:
                if not out.finished:
                    continue
                spec, arrival_s = live.pop(out.request_id)
                times = tuple(x - t0 for x in out.token_times_s)
                run.records.append(RequestRecord(
                    request_id=spec.request_id, class_name=spec.class_name, arrival_s=arrival_s,
                    first_token_s=times[0] if times else None, token_times_s=times, finish_s=times[-1] if times else now(),
                    prompt_tokens=spec.prompt_tokens, output_tokens=len(out.output_token_ids), status="ok",
                    is_warmup=spec.is_warmup, num_preemptions=out.num_preemptions))
                done += 1
                if on_progress:
                    on_progress(done)
    except KeyboardInterrupt:
        run.complete = False
        for request_id, (spec, arrival_s) in list(live.items()):
            engine.abort(request_id)  # type: ignore[attr-defined]
            run.records.append(RequestRecord(
                request_id=request_id, class_name=spec.class_name, arrival_s=arrival_s, first_token_s=None,
                token_times_s=(), finish_s=now(), prompt_tokens=spec.prompt_tokens, output_tokens=0,
                status="aborted", error="interrupted (Ctrl-C)", is_warmup=spec.is_warmup))
    finally:
        if nvml is not None:
            nvml.stop()
            run.nvml_error = nvml.error
    return run
