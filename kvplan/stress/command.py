"""`kvplan stress`: validate the scenario, predict, run, measure, write result.json (+ report).

Nothing is written until the scenario, the model and the engine settings have been checked, and
result.json is written atomically; an interrupted run still writes what it measured, marked
incomplete.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from kvplan.errors import KvplanError
from kvplan.report.result import RunResult, collect_environment
from kvplan.stress.metrics import compute_metrics, compute_per_class_metrics
from kvplan.stress.predict import LATENCY_KEYS, MEMORY_KEYS, load_cost_model, predict
from kvplan.stress.scenario import Scenario, load_scenario
from kvplan.stress.workload import RequestSpec, generate_requests

CLOSED_LOOP_DURATION_CAP = 100_000  # requests generated for a closed-loop duration_s scenario


@dataclass(frozen=True)
class StressOptions:
    scenario_path: Path
    out_dir: Path | None
    allocator: str = "paged"  # paged | contiguous | both
    progress: bool = True
    calibration: Path | None = None
    target: str | None = None
    api: str = "completions"
    served_model_name: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 120.0
    recalibrate: bool = False  # calibrate just before the run: this machine's speed drifts between runs


def measured_memory(run: Any, engine: Any) -> dict[str, Any]:
    """The run's memory and scheduling figures, named as the prediction names them."""
    tl = run.timeline
    peak = max((s.kv_bytes_used or 0 for s in tl), default=0)
    return {
        "num_gpu_blocks": engine.num_gpu_blocks, "kv_pool_bytes": engine.num_gpu_blocks * engine.bytes_per_block,
        "bytes_per_block": engine.bytes_per_block, "peak_kv_bytes": peak, "peak_kv_blocks": peak // engine.bytes_per_block,
        "max_concurrency": max((s.running or 0 for s in tl), default=0),
        "num_preemptions": tl[-1].preemptions if tl else 0, "preemption_onset_s": run.first_preemption_s,
        "preemption_onset_step": run.first_preemption_step,
        "prefix_hit_tokens": tl[-1].prefix_hit_tokens if tl else 0,
        "peak_rss_bytes": max((s.rss_bytes or 0 for s in tl), default=None) or None,
        "peak_cuda_allocated_bytes": max((s.cuda_max_allocated_bytes or 0 for s in tl), default=0) or None,
        "peak_nvml_used_bytes": max((s.nvml_used_bytes or 0 for s in tl), default=0) or None,
        "num_steps": run.num_steps,
    }


def _requests(scenario: Scenario, vocab_size: int) -> list[RequestSpec]:
    cap = CLOSED_LOOP_DURATION_CAP if scenario.arrival.type == "concurrency" and scenario.num_requests is None else None
    return generate_requests(scenario, vocab_size=vocab_size, max_requests=cap)


def _run_one(scenario: Scenario, requests: list[RequestSpec], allocator: str, opts: StressOptions,
             console: Console) -> RunResult:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kvplan.stress.runner import build_engine, run_engine

    engine = build_engine(scenario, allocator)
    cost_model, cost_source = load_cost_model(scenario, opts.calibration)
    prediction = predict(scenario, requests, num_gpu_blocks=engine.num_gpu_blocks, bytes_per_block=engine.bytes_per_block,
                         cost_model=cost_model, cost_source=cost_source, allocator=allocator)
    total = scenario.num_requests or None
    with Progress(TextColumn(f"[bold]{scenario.name}[/bold] ({allocator})"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not opts.progress, transient=True) as bar:
        task = bar.add_task("requests", total=total)
        run = run_engine(engine, scenario, requests, on_progress=lambda n: bar.update(task, completed=n))
    records = run.records
    metrics = {**compute_metrics(records, scenario.slo), **measured_memory(run, engine)}
    notes = [f"cost model: {cost_source}"]
    if not run.complete:
        notes.append("interrupted: partial result")
    if run.nvml_error:
        notes.append(run.nvml_error)
    device_name = None
    if engine.config.is_cuda:
        import torch

        device_name = torch.cuda.get_device_name(engine.config.device)
    return RunResult(
        scenario=scenario.to_dict(), allocator=allocator,
        environment=collect_environment(device=engine.config.device, device_name=device_name),
        prediction=prediction, requests=[r.to_dict() for r in records], metrics=metrics,
        per_class=compute_per_class_metrics(records, scenario.slo), timeline=run.timeline,
        complete=run.complete, notes=notes)


def _error_pct(pred: Any, meas: Any) -> str:
    if not isinstance(pred, (int, float)) or not isinstance(meas, (int, float)):
        return "—"
    if meas == 0:
        return "0.0%" if pred == 0 else "∞"
    return f"{(pred - meas) / abs(meas) * 100:+.1f}%"


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def render_comparison(console: Console, result: RunResult) -> None:
    from rich.table import Table

    t = Table(title=f"{result.scenario_name} ({result.allocator}): predicted vs measured", header_style="bold")
    for col in ("metric", "predicted", "measured", "error"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for key in (*MEMORY_KEYS, *LATENCY_KEYS):
        p, m = result.prediction.get(key), result.metrics.get(key)
        if p is None and m is None:
            continue
        t.add_row(key, _fmt(p), _fmt(m), _error_pct(p, m))
    console.print(t)
    for note in result.notes:
        console.print(f"  [dim]{note}[/dim]")


def run_stress(opts: StressOptions, console: Console | None = None) -> list[Path]:
    """The whole command; returns the files written."""
    console = console or Console()
    scenario = load_scenario(opts.scenario_path)
    if opts.allocator not in ("paged", "contiguous", "both"):
        raise KvplanError(f"--allocator {opts.allocator!r}: choose paged, contiguous or both")
    if opts.target and opts.allocator != "paged":
        raise KvplanError("--allocator applies to the bundled engine; a --target server uses its own allocator")
    out_dir = opts.out_dir or Path("reports") / scenario.name
    if out_dir.exists() and not out_dir.is_dir():
        raise KvplanError(f"--out {out_dir} exists and is not a directory")
    spec = scenario.model_spec()
    requests = _requests(scenario, spec.vocab_size)
    if opts.recalibrate:
        from kvplan.stress.calibrate import calibrate_scenario, calibration_path

        path = opts.calibration or calibration_path(scenario.name, scenario.engine.device)
        calibrate_scenario(scenario).save(path)
        console.print(f"calibrated the cost model on this machine: {path}")
        opts = replace(opts, calibration=path)
    if opts.target:
        from kvplan.stress.http_command import run_http_stress

        results = [run_http_stress(scenario, requests, opts, console)]
    else:
        allocators = ["paged", "contiguous"] if opts.allocator == "both" else [opts.allocator]
        results = []
        for allocator in allocators:
            try:
                results.append(_run_one(scenario, requests, allocator, opts, console))
            except KeyboardInterrupt:  # interrupted outside the step loop (engine build): nothing measured
                raise KvplanError("interrupted before any request ran; nothing written") from None
            if not results[-1].complete:
                break
    written = []
    for res in results:
        name = "result.json" if len(results) == 1 else f"result-{res.allocator}.json"
        written.append(res.write_atomic(out_dir / name))
        render_comparison(console, res)
    if len(results) == 2:
        paged, contiguous = results
        pc, cc = paged.metrics["max_concurrency"], contiguous.metrics["max_concurrency"]
        pt, ct = paged.metrics.get("output_throughput"), contiguous.metrics.get("output_throughput")
        console.print(f"[bold]paged vs contiguous on the same {paged.metrics['kv_pool_bytes']:,} B pool:[/bold] "
                      f"max concurrency {pc} vs {cc} ({pc / max(cc, 1):.1f}x; predicted "
                      f"{paged.prediction['max_concurrency']} vs {contiguous.prediction['max_concurrency']}), "
                      f"output throughput {_fmt(pt)} vs {_fmt(ct)} tok/s" + (f" ({pt / ct:.2f}x)" if pt and ct else ""))
    try:
        from kvplan.report.html import write_report
    except ImportError:
        write_report = None  # the HTML report module is optional until it lands
    if write_report is not None:
        written.append(write_report(results, out_dir / "report.html"))
    for path in written:
        console.print(f"wrote {path}")
    return written
