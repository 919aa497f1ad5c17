"""Gate commands: `kvplan gate` (a result against its baseline and its prediction; exit 1 on a
regression) and `kvplan baseline create` / `update`. Pure Python: no torch."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer

from kvplan.cli.app import app, baseline_app, json_safe, make_console
from kvplan.cli.options import AsJson
from kvplan.errors import KvplanError


@app.command()
def gate(
    result: Annotated[Path, typer.Option("--result", "-r", help="The result.json to check.")],
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            "-b",
            help="Baseline result (default: reports/baselines/SCENARIO.json, else the one kvplan bundles for its own "
                "scenarios).",
        ),
    ] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write the checks as JUnit XML here.")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Also write the verdict as an HTML page here.")] = None,
    tolerance: Annotated[
        list[str] | None,
        typer.Option(
            "--tolerance",
            "-t",
            help="NAME=+15% or NAME=exact, vs the baseline; repeatable; overrides the scenario's gate block.",
        ),
    ] = None,
    prediction_tolerance: Annotated[
        list[str] | None, typer.Option("--prediction-tolerance", help="NAME=2%, measured vs predicted; repeatable.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Compare a result with its baseline and its prediction: exit 0 pass, 1 regression, 2 bad input."""
    from kvplan.files import check_output_path, write_files
    from kvplan.gate.baseline import baseline_path
    from kvplan.gate.checks import run_gate
    from kvplan.gate.junit import junit_xml
    from kvplan.report.gate_view import gate_html, render_gate
    from kvplan.results.result import load_result

    outputs = {"junit": junit, "html": html}
    if junit is not None and html is not None and junit.absolute() == html.absolute():
        raise KvplanError(f"--junit and --html name the same file {junit}")
    for flag, path in outputs.items():
        if path is not None:
            check_output_path(path, inputs=(result, baseline), flag=f"--{flag}")
    current = load_result(result)
    if baseline is None:
        baseline = baseline_path(current)
        if not baseline.exists():
            from kvplan.gate.baseline import bundled_baseline

            bundled = bundled_baseline(current)
            if bundled is None:
                raise KvplanError(f"no baseline {baseline} for scenario {current.scenario_name!r}; pass --baseline or "
                                  f"create it with `kvplan baseline create {result}`")
            typer.echo(f"kvplan: gating against kvplan's bundled {bundled.name} (no {baseline} here)", err=True)
            baseline = bundled
    verdict = run_gate(
        load_result(baseline),
        current,
        tolerance=tolerance or [],
        prediction_tolerance=prediction_tolerance or [],
        baseline_where=str(baseline),
        result_where=str(result),
    )
    if as_json:  # the verdict and every check, with the same signed change the table shows
        typer.echo(json.dumps(json_safe({
            "scenario": verdict.scenario, "allocator": verdict.allocator, "passed": verdict.passed,
            "baseline": str(baseline), "result": str(result), "notes": list(verdict.notes),
            "checks": [{**dataclasses.asdict(c), "delta_pct": c.delta_pct, "delta_formula": c.delta_formula}
                       for c in verdict.checks]})))
    else:
        render_gate(make_console(), verdict, baseline_where=str(baseline), result_where=str(result))
    files: dict[Path, str] = {}  # both or neither
    if junit is not None:
        files[junit] = junit_xml(verdict)
    if html is not None:
        files[html] = gate_html(verdict, baseline_where=str(baseline), result_where=str(result))
    write_files(files)
    if not verdict.passed:
        raise typer.Exit(1)  # main() returns click's exit code: 1 = regression, distinct from 2 = bad input


@baseline_app.command("update")
def baseline_update(
    result: Annotated[Path, typer.Argument(help="A complete result.json to make the baseline of its scenario.")],
    baselines_dir: Annotated[Path, typer.Option("--dir", help="Baselines directory.")] = Path("reports/baselines"),
    force: Annotated[
        bool,
        typer.Option("--force", help="Store it even if it fails its gate against the current baseline.", metavar=""),
    ] = False,
    allow_failed: Annotated[
        bool,
        typer.Option("--allow-failed", help="Store a run whose requests failed beyond its max_error_rate.", metavar=""),
    ] = False,
) -> None:
    """Copy RESULT.json to reports/baselines/SCENARIO.json (validated, gated, atomic); commit it afterwards."""
    from kvplan.files import check_output_dir
    from kvplan.gate.baseline import update_baseline

    check_output_dir(baselines_dir)
    done = update_baseline(result, baselines_dir, force=force, allow_failed=allow_failed)
    was = (
        f" (replaced the baseline of commit {done.previous_commit[:12]})"
        if done.previous_commit
        else (" (replaced)" if done.replaced else "")
    )
    typer.echo(f"kvplan: baseline {done.path}{was}; commit it to make it the reference", err=True)




@baseline_app.command("create")
def baseline_create(
    result: Annotated[Path, typer.Argument(help="Any complete result.json: the first baseline of its scenario.")],
    baselines_dir: Annotated[Path, typer.Option("--dir", help="Baselines directory.")] = Path("reports/baselines"),
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing baseline without gating.", metavar="")
    ] = False,
    allow_failed: Annotated[
        bool,
        typer.Option("--allow-failed", help="Store a run whose requests failed beyond its max_error_rate.", metavar=""),
    ] = False,
) -> None:
    """Make RESULT.json its scenario's first baseline (not gated against its prediction); commit it afterwards."""
    from kvplan.files import check_output_dir
    from kvplan.gate.baseline import create_baseline

    check_output_dir(baselines_dir)
    done = create_baseline(result, baselines_dir, force=force, allow_failed=allow_failed)
    typer.echo(
        f"kvplan: baseline {done.path}{' (replaced)' if done.replaced else ''}; commit it to make it the reference",
        err=True,
    )
