"""What `kvplan stress` shows on the console: the predicted-vs-measured table per run, the
paged-vs-contiguous line, and a failed run's errors (the command is `kvplan.cli.stress_command`)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvplan.gate.agreement import Agreement, agreements
from kvplan.report.formatting import fmt, fmt_pct
from kvplan.report.verdict import build_verdict
from kvplan.results.result import RunResult


def render_agreement(console: Console, result: RunResult) -> None:
    """Every predicted figure, predicted vs measured, with the error raw and at the measured machine
    speed, each judged against the row's tolerance as the HTML report does (agreement.py), then
    the notes and the verdict."""
    rows = agreements(result)
    replicas = result.scenario.get("replicas", 1)
    routed = f", {replicas} replicas, {result.scenario.get('router')} router" if replicas > 1 else ""
    t = Table(title=f"{result.scenario_name} ({result.allocator}{routed}): predicted vs measured", header_style="bold")
    at_speed = {r.key: r for r in rows if r.kind == "timing at measured speed"}
    speed_tol = next(iter(at_speed.values())).tolerance_pct if at_speed else 0.0
    cols = ("metric", "predicted", "measured", "error", "tolerance") + (
        (f"at measured speed (±{speed_tol:g}%)",) if at_speed else ()
    )
    for col in cols:
        t.add_column(col, justify="left" if col == "metric" else "right")
    for r in rows:
        if r.kind == "timing at measured speed":
            continue
        cells: list[str | Text] = [r.key, fmt(r.predicted, r.unit), "not "
            "measured" if r.measured is None else fmt(r.measured, r.unit),
                 _judged(r), f"±{r.tolerance_pct:g}%"]
        if at_speed:
            scaled = at_speed.get(r.key)
            cells.append(_judged(scaled) if scaled is not None else "")
        t.add_row(*cells)
    console.print(t)
    for note in result.notes:
        console.print(f"  [dim]{note}[/dim]")
    verdict = build_verdict(result, rows)
    color = {"pass": "green", "fail": "red", "warn": "yellow"}[verdict.status]
    console.print(f"[bold {color}]verdict: {verdict.headline}.[/bold {color}]", highlight=False)
    console.print(verdict.text, highlight=False, markup=False)


def _judged(r: Agreement) -> Text:
    """The error, green within the tolerance and red outside; the status word when not judged."""
    if r.status in ("pass", "miss"):
        return Text(fmt_pct(r.error_pct) if r.error_pct is not None else "measured 0",
                    style="green" if r.status == "pass" else "bold red")
    return Text(r.status, style="dim")


def render_allocators(console: Console, paged: RunResult, contiguous: RunResult) -> None:
    pc, cc = paged.metrics["peak_running_requests"], contiguous.metrics["peak_running_requests"]
    pt, ct = paged.metrics.get("output_throughput"), contiguous.metrics.get("output_throughput")
    console.print(
        f"[bold]paged vs contiguous on the same {paged.metrics['kv_pool_bytes']:,} B pool:[/bold] "
        f"peak running requests {pc} vs {cc} ({pc / max(cc, 1):.1f}x; predicted "
        f"{paged.prediction['peak_running_requests']} vs {contiguous.prediction['peak_running_requests']}), "
        f"output throughput {fmt(pt, 'tok/s')} vs {fmt(ct, 'tok/s')}" + (f" ({pt / ct:.2f}x)" if pt and ct else "")
    )


def render_failure(console: Console, result: RunResult) -> None:
    """A failed run says so last, in red, with its first distinct errors: it must never read as a success."""
    m = result.metrics
    console.print(f"[bold red]FAILED[/bold red] ({result.allocator}): {m.get('failed')} of {m.get('num_requests')} "
                  f"requests failed; first errors:")
    for error in result.errors:
        console.print(Text(f"  {error}", style="red"), highlight=False)  # the server's words: never markup
