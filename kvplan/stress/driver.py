"""One stress run, whatever the target: predict first, run, then measure against the prediction.

    pool  = target.pool()                         # blocks x bytes the prediction is made for
    prediction = predict_run(scenario, requests, pool) # before anything runs (no model forward)
    run   = target.run(scenario, requests)         # TargetRun: records, timeline, memory figures
    metrics = compute_metrics(run.records) + run.memory
    speed = sum(measured step times) / sum(modelled)  # how fast this machine ran today
    -> RunResult (result.json), with the prediction's error also after re-simulating at that speed
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kvplan.perf.step_cost import StepCost
from kvplan.results.machine_facts import machine_facts
from kvplan.results.metrics import compute_metrics, compute_per_class_metrics
from kvplan.results.result import RunResult
from kvplan.stress.cpu_cost import LinearCostModel
from kvplan.stress.machine_speed import SpeedResampled, machine_speed, normalized_errors
from kvplan.stress.prediction import load_cost_model, predict_run, rescaled_timing
from kvplan.stress.scenario import Scenario
from kvplan.stress.target import Target, TargetRun
from kvplan.workload.request import Request


def prediction_before_run(scenario: Scenario, requests: list[Request], target: Target,
                calibration: Path | None) -> tuple[dict[str, Any], StepCost | None, list[str]]:
    pool = target.pool()
    if pool.num_gpu_blocks is None:
        return {}, None, ["no prediction: the scenario does not fix the server's KV pool (kv_cache_memory_bytes)"]
    cost_model, source = load_cost_model(scenario, calibration, target.device_name)
    prediction = predict_run(
        scenario,
        requests,
        num_gpu_blocks=pool.num_gpu_blocks,
        bytes_per_block=pool.bytes_per_block,
        cost_model=cost_model,
        cost_source=source,
        allocator=target.allocator,
    )
    return prediction, cost_model, [f"cost model: {source}"]


def calibration_mismatch(cost_model: StepCost | None) -> list[str]:
    """How a calibrated cost model's machine differs from this one (empty for GPU models and matches)."""
    if not isinstance(cost_model, LinearCostModel):
        return []
    return machine_facts().differences(cost_model.machine)


LOG_PROGRESS_EVERY_S = 5.0  # a plain progress line this often when the console is not a terminal (CI logs)


def _log_progress(scenario: Scenario, target: Target, total: int, console: Console):
    """A callback printing `name (label): n/total requests, t s` at most every LOG_PROGRESS_EVERY_S:
    a live bar means nothing in a CI log, and minutes of silence look like a hang."""
    import time

    started = last = time.monotonic()

    def update(n: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= LOG_PROGRESS_EVERY_S or n == total:
            last = now
            console.print(f"{scenario.name} {target.label}: {n:,}/{total:,} requests, {now - started:.0f} s",
                          markup=False, highlight=False)

    return update


def _measure(scenario: Scenario, target: Target, requests: list[Request], console: Console,
             progress: bool) -> TargetRun:
    if progress and not console.is_terminal:
        return target.run(scenario, requests, _log_progress(scenario, target, len(requests), console))
    with Progress(TextColumn(f"[bold]{scenario.name}[/bold] {target.label}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not progress, transient=True) as bar:
        task = bar.add_task("requests", total=len(requests))
        return target.run(scenario, requests, lambda n: bar.update(task, completed=n))


def _verdict(scenario: Scenario, run: TargetRun, metrics: dict[str, Any]) -> tuple[str, list[str]]:
    """("failed", first distinct errors) when more requests failed than the scenario allows; an
    interrupted run's aborted requests are the user's doing, not the target's failure."""
    errored = [r for r in run.records if r.status == "error" and not r.is_warmup]
    total = metrics.get("num_requests") or 0
    distinct = list(dict.fromkeys((r.error or "unknown error")[:300] for r in errored))[:5]
    failed = bool(total) and len(errored) / total > scenario.max_error_rate
    return ("failed" if failed else "ok"), distinct


def _normalized(
    scenario: Scenario,
    requests: list[Request],
    prediction: dict[str, Any],
    cost_model: StepCost | None,
    speed: Any,
    metrics: dict[str, Any],
) -> dict[str, float]:
    """The prediction's error once re-simulated at the step speeds this run measured; one scalar
    rescaling where the prediction has no step count to resample over."""
    if not speed.step_ratios or prediction.get("num_gpu_blocks") is None:
        return normalized_errors(prediction, metrics, speed.ratio)
    rescaled = rescaled_timing(
        scenario, requests, prediction, SpeedResampled(cost_model, speed.step_modelled_s, speed.step_ratios)
    )
    return normalized_errors(rescaled, metrics)


def run_target(scenario: Scenario, requests: list[Request], target: Target, *, calibration: Path | None = None,
               console: Console | None = None, progress: bool = True, notes: tuple[str, ...] = ()) -> RunResult:
    """Predict, run `requests` on `target`, measure; the result of one allocator / server.
    `notes`: what the caller knows about the requests (a dataset's skipped rows, estimated counts)."""
    prediction, cost_model, before = prediction_before_run(scenario, requests, target, calibration)
    all_notes = [*notes, *before]
    run = _measure(scenario, target, requests, console or Console(), progress)
    metrics = {**compute_metrics(run.records, scenario.slo), **run.memory}
    if run.reference is not None:
        waits = getattr(run.reference, "waits", None)
        wait_free = compute_metrics(waits.records(run.records), scenario.slo) if waits is not None else None
        metrics.update(run.reference.figures(metrics, wait_free))
    if run.environment.engine_threads is not None:
        metrics["engine_threads"] = run.environment.engine_threads
    speed = machine_speed(cost_model, run.step_shapes, run.step_times_s, run.cpu_s, run.wall_s, metrics)
    normalized: dict[str, float] = {}
    mismatch = calibration_mismatch(cost_model)
    if mismatch:
        run.environment.calibration_mismatch = mismatch
        all_notes.append("calibration from another machine or torch: " + "; ".join(mismatch)
                     + " (run `kvplan calibrate` here, or `kvplan stress --calibrate`)")
    if speed is not None:
        metrics.update(speed.figures())
        normalized = _normalized(scenario, requests, prediction, cost_model, speed, metrics)
        all_notes.append(speed.sentence())
    if not run.complete:
        all_notes.append("interrupted: partial result")
    verdict, errors = _verdict(scenario, run, metrics)
    if verdict == "failed":
        all_notes.insert(0, f"FAILED: {metrics.get('failed')} of {metrics.get('num_requests')} requests failed "
                        f"(max_error_rate {scenario.max_error_rate:g})")
    settings = scenario.to_dict()
    if target.allocator in ("paged", "contiguous") and isinstance(settings.get("engine"), dict):
        settings["engine"]["allocator"] = target.allocator  # the engine this result ran (--allocator both runs two)
    return RunResult(
        scenario=settings, allocator=target.allocator, environment=run.environment,
        prediction=prediction, requests=[r.to_dict() for r in run.records], metrics=metrics,
        per_class=compute_per_class_metrics(run.records, scenario.slo), timeline=run.timeline,
        complete=run.complete, notes=[*run.notes, *all_notes], server_telemetry=run.server_telemetry,
        server_info=run.server_info, normalized_error_pct=normalized, verdict=verdict, errors=errors)
