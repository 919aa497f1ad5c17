"""What `kvplan stress` shows: the predicted-vs-measured table per run, the paged-vs-contiguous
line, and the HTML report beside the result files."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kvplan.report.formatting import error_pct, fmt, fmt_pct
from kvplan.report.verdict import build_verdict
from kvplan.stress.command import StressOptions, run_stress
from kvplan.stress.figures import FIGURES, figure_value, prediction_key, unit_of
from kvplan.stress.result import RunResult


def render_comparison(console: Console, result: RunResult) -> None:
    """Every predicted figure of the registry, predicted vs measured, with the prediction's error."""
    t = Table(title=f"{result.scenario_name} ({result.allocator}): predicted vs measured", header_style="bold")
    normalized = result.normalized_error_pct
    cols = ("metric", "predicted", "measured", "error") + (("error at measured speed",) if normalized else ())
    for col in cols:
        t.add_column(col, justify="left" if col == "metric" else "right")
    for f in FIGURES.values():
        if not f.predicted:
            continue
        p, m = figure_value(result.prediction, prediction_key(f.name)), figure_value(result.metrics, f.name)
        if p is None and m is None:
            continue
        row = [f.name, fmt(p, unit_of(f.name)), fmt(m, unit_of(f.name)), fmt_pct(error_pct(p, m))]
        t.add_row(*row, *((fmt_pct(normalized.get(f.name)),) if normalized else ()))
    console.print(t)
    for note in result.notes:
        console.print(f"  [dim]{note}[/dim]")
    verdict = build_verdict(result)
    color = {"pass": "green", "fail": "red", "warn": "yellow"}[verdict.status]
    console.print(f"[bold {color}]verdict: {verdict.headline}.[/bold {color}]", highlight=False)
    console.print(verdict.text, highlight=False, markup=False)


def render_allocators(console: Console, paged: RunResult, contiguous: RunResult) -> None:
    pc, cc = paged.metrics["peak_running_requests"], contiguous.metrics["peak_running_requests"]
    pt, ct = paged.metrics.get("output_throughput"), contiguous.metrics.get("output_throughput")
    console.print(f"[bold]paged vs contiguous on the same {paged.metrics['kv_pool_bytes']:,} B pool:[/bold] "
                  f"peak running requests {pc} vs {cc} ({pc / max(cc, 1):.1f}x; predicted "
                  f"{paged.prediction['peak_running_requests']} vs {contiguous.prediction['peak_running_requests']}), "
                  f"output throughput {fmt(pt, 'tok/s')} vs {fmt(ct, 'tok/s')}" + (f" ({pt / ct:.2f}x)" if pt and ct else ""))


def render_failure(console: Console, result: RunResult) -> None:
    """A failed run says so last, in red, with its first distinct errors: it must never read as a success."""
    m = result.metrics
    console.print(f"[bold red]FAILED[/bold red] ({result.allocator}): {m.get('failed')} of {m.get('num_requests')} "
                  f"requests failed; first errors:")
    for error in result.errors:
        console.print(f"  [red]{error}[/red]", highlight=False, markup=False)


@dataclass(frozen=True)
class StressOutcome:
    written: list[Path]
    failed: bool  # a run failed its scenario's max_error_rate: `kvplan stress` exits 1


def stress_and_report(opts: StressOptions, console: Console | None = None) -> StressOutcome:
    """`kvplan stress`: run, print the comparison, write report.html; the files written and whether
    a run failed (written all the same: a failed run's result is evidence)."""
    from kvplan.report.html import write_report

    console = console or Console()
    run = run_stress(opts, console)
    for result in run.results:
        render_comparison(console, result)
    if len(run.results) == 2:
        render_allocators(console, *run.results)
    written = [*run.written, write_report(run.results, run.out_dir / "report.html")]
    for path in written:
        console.print(f"wrote {path}")
    failed = [r for r in run.results if r.verdict == "failed"]
    for result in failed:
        render_failure(console, result)
    return StressOutcome(written, bool(failed))
