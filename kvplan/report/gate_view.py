"""A gate verdict for people: a rich table (metric, baseline or prediction, current, delta, limit,
PASS/FAIL) and the same as a one-table HTML page."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvplan.gate.checks import GateCheck, GateVerdict, format_number
from kvplan.report.jinja import render_template


def _num(v: float | None) -> str:
    return format_number(v, significant=4)  # a table cell; the HTML page and JUnit keep 6 digits


def _delta(c: GateCheck) -> str:
    if c.delta is None:
        return ""
    sign = "+" if c.delta > 0 else ""
    pct = c.delta_pct
    return f"{sign}{_num(c.delta)}" + (f" ({pct:+.1f}%)" if pct is not None else "")


def render_gate(console: Console, verdict: GateVerdict, *, baseline_where: str = "", result_where: str = "") -> None:
    title = f"kvplan gate: {verdict.scenario} ({verdict.allocator})"
    sign = "delta: current - baseline (% of baseline); a prediction's: predicted - measured (% of measured)"
    t = Table(title=title, header_style="bold",
              caption=f"baseline {baseline_where}; {sign}" if baseline_where else sign)
    t.add_column("check", style="dim")
    t.add_column("metric")
    t.add_column("baseline / predicted", justify="right")
    t.add_column("current", justify="right")
    t.add_column("delta", justify="right")
    t.add_column("limit", justify="right")
    t.add_column("result")
    for c in verdict.checks:
        verdict_text = "[green]PASS[/green]" if c.passed else "[bold red]FAIL[/bold red]"
        if c.note:
            verdict_text += f" [dim]({c.note})[/dim]"
        # names and notes come from files: escaped so "[x]" is never read as rich markup
        t.add_row(c.kind, escape(c.metric), _num(c.baseline), _num(c.current), _delta(c), escape(c.limit), verdict_text)
    console.print(t)
    for note in verdict.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    failures = verdict.failures
    if failures:
        console.print(f"[bold red]FAIL[/bold red]: {len(failures)} of {len(verdict.checks)} checks failed: "
                      f"{escape(', '.join(c.metric for c in failures))}")
    else:
        console.print(f"[green]PASS[/green]: {len(verdict.checks)} checks")


def gate_html(verdict: GateVerdict, *, baseline_where: str = "", result_where: str = "") -> str:
    """A one-table HTML page of the verdict (jinja2, autoescaped; no network)."""
    return render_template("gate.html.j2", verdict=verdict, baseline_where=baseline_where, result_where=result_where,
                           fmt=format_number)
