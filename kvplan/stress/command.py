"""`kvplan stress`: validate the scenario, then for each target predict, run, measure and write
result.json. Printing the tables and writing the HTML report are the report layer's job
(`kvplan.report.stress_view`).

Nothing is written until the scenario, the model and the engine settings have been checked, and
result.json is written atomically; an interrupted run still writes what it measured, marked
incomplete.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from rich.console import Console

from kvplan.errors import KvplanError
from kvplan.stress.driver import run_target
from kvplan.stress.result import RunResult
from kvplan.stress.scenario import Scenario
from kvplan.stress.scenario_loader import load_scenario
from kvplan.stress.target import Target
from kvplan.stress.workload import RequestSpec, generate_requests

CLOSED_LOOP_DURATION_CAP = 100_000  # requests generated for a closed-loop duration_s scenario
ALLOCATOR_CHOICES = ("paged", "contiguous", "both")


@dataclass(frozen=True)
class StressOptions:
    scenario_path: Path
    out_dir: Path | None = None
    allocator: Literal["paged", "contiguous", "both"] = "paged"
    progress: bool = True
    calibration: Path | None = None
    recalibrate: bool = False  # calibrate just before the run: this machine's speed drifts between runs
    target: str | None = None  # an OpenAI-compatible server's URL; None: the bundled engine
    api: str = "completions"
    served_model_name: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 120.0


@dataclass(frozen=True)
class StressRun:
    scenario: Scenario
    out_dir: Path
    results: tuple[RunResult, ...]
    written: tuple[Path, ...]  # the result files


def _requests(scenario: Scenario) -> list[RequestSpec]:
    cap = CLOSED_LOOP_DURATION_CAP if scenario.arrival.type == "concurrency" and scenario.num_requests is None else None
    return generate_requests(scenario, vocab_size=scenario.model_spec().vocab_size, max_requests=cap)


def _check(opts: StressOptions, scenario: Scenario) -> Path:
    if opts.allocator not in ALLOCATOR_CHOICES:
        raise KvplanError(f"--allocator {opts.allocator!r}: choose paged, contiguous or both")
    if opts.target and opts.allocator != "paged":
        raise KvplanError("--allocator applies to the bundled engine; a --target server uses its own allocator")
    out_dir = opts.out_dir or Path("reports") / scenario.name
    if out_dir.exists() and not out_dir.is_dir():
        raise KvplanError(f"--out {out_dir} exists and is not a directory")
    return out_dir


def _recalibrate(opts: StressOptions, scenario: Scenario, console: Console) -> StressOptions:
    from kvplan.stress.calibrate import calibrate_scenario, calibration_path

    path = opts.calibration or calibration_path(scenario.name, scenario.engine.device)
    calibrate_scenario(scenario).save(path)
    console.print(f"calibrated the cost model on this machine: {path}")
    return replace(opts, calibration=path)


def _make_target(allocator: str, opts: StressOptions, scenario: Scenario) -> Target:
    if opts.target:
        from kvplan.stress.targets.http_target import HttpOptions, HttpTarget

        return HttpTarget(scenario, HttpOptions(opts.target, opts.api, opts.served_model_name, opts.api_key_env,
                                                opts.timeout_s))
    from kvplan.stress.targets.engine_target import EngineTarget

    return EngineTarget(scenario, allocator)


def run_stress(opts: StressOptions, console: Console | None = None) -> StressRun:
    """Every run the options ask for; returns the results and the result files written."""
    console = console or Console()
    scenario = load_scenario(opts.scenario_path)
    out_dir = _check(opts, scenario)
    requests = _requests(scenario)
    if opts.recalibrate:
        opts = _recalibrate(opts, scenario, console)
    results: list[RunResult] = []
    for allocator in ["paged", "contiguous"] if opts.allocator == "both" else [opts.allocator]:
        try:  # built one at a time, so two engines' KV pools never coexist
            results.append(run_target(scenario, requests, _make_target(allocator, opts, scenario),
                                      calibration=opts.calibration, console=console, progress=opts.progress))
        except KeyboardInterrupt:  # interrupted outside the request loop (engine build): nothing measured
            raise KvplanError("interrupted before any request ran; nothing written") from None
        if not results[-1].complete:
            break
    written = tuple(res.write_atomic(out_dir / ("result.json" if len(results) == 1 else f"result-{res.allocator}.json"))
                    for res in results)
    return StressRun(scenario, out_dir, tuple(results), written)
