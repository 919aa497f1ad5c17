"""`kvplan stress`: the use case, from flags to files. Run the scenario (`kvplan.stress.command`),
print the comparison (`kvplan.report.stress_view`), then write the result files and report.html
together (all or none). Heavy imports stay inside the functions: `--help` loads none of them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kvplan.cli.app import app, json_safe, make_console
from kvplan.cli.options import Threads
from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from rich.console import Console

    from kvplan.stress.command import StressOptions, StressRun


@app.command()
def stress(
    scenario: Annotated[Path, typer.Option("--scenario", "-s", help="A scenario YAML file, or a bundled scenario by name (`kvplan scenarios` lists them).")],
    out: Annotated[Optional[str], typer.Option("--out", help="Output folder (default: a new reports/<scenario>/<UTC time>, linked as reports/<scenario>/latest).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the run already in --out.", metavar="")] = False,
    allocator: Annotated[str, typer.Option(help="paged, contiguous, or both (same KV memory, side by side).")] = "paged",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.", metavar="")] = False,
    calibration: Annotated[Optional[Path], typer.Option(help="Cost-model file from `kvplan calibrate` (default: profiles/calibration/).")] = None,
    recalibrate: Annotated[bool, typer.Option("--calibrate", help="Calibrate the cost model right before the run (same machine state), and store it.", metavar="")] = False,
    target: Annotated[Optional[str], typer.Option(help="An OpenAI-compatible server, e.g. http://127.0.0.1:8000.")] = None,
    api: Annotated[str, typer.Option(help="With --target: completions or chat.")] = "completions",
    served_model_name: Annotated[Optional[str], typer.Option(help="With --target: the model name the server serves.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="With --target: environment variable holding the API key.")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="With --target: per-request timeout.")] = 120.0,
    threads: Threads = None,
    server_kind: Annotated[str, typer.Option("--server-kind", help="With --target: auto (ask the server what it accepts), vllm, sglang, tgi or openai.")] = "auto",
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="With --target: the server's tokenizer (a local directory or a repo in the Hugging Face cache; offline) for text prompts of the scenario's exact length.")] = None,
    output_format: Annotated[str, typer.Option("--format", help="kvplan, or vllm: also write result.vllm.json with the keys and per-request arrays of `vllm bench serve --save-result`.")] = "kvplan",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (files written, verdicts, measured and predicted metrics) on stdout; the tables go to stderr.", metavar="")] = False,
) -> None:
    """Run a scenario on the bundled engine (or a server) and compare with the prediction made first."""
    from kvplan.stress.command import StressOptions

    if out is not None and not out.strip():
        raise KvplanError("--out is empty: name a folder (or leave --out out for a new reports/<scenario>/<time>)")
    outcome = stress_and_report(StressOptions(scenario, out_dir=Path(out) if out is not None else None, allocator=allocator, progress=not no_progress,
                                    calibration=calibration, recalibrate=recalibrate, target=target, api=api,
                                    served_model_name=served_model_name, api_key_env=api_key_env, timeout_s=timeout_s,
                                    force=force, server_kind=server_kind, tokenizer=tokenizer, output_format=output_format,
                                    threads=threads), console=make_console(stderr=True) if as_json else None)
    if as_json:
        typer.echo(json.dumps(json_safe(outcome.summary())))
    if outcome.interrupted:
        typer.echo("kvplan: interrupted: the partial result is written, marked incomplete", err=True)
        raise typer.Exit(130)  # as a shell reports SIGINT: an interrupted run never reads as a success
    if outcome.failed:
        raise typer.Exit(1)  # written, but failed: CI must see it


@dataclass(frozen=True)
class StressOutcome:
    written: list[Path]
    failed: bool  # a run failed its scenario's max_error_rate: `kvplan stress` exits 1
    interrupted: bool = False  # Ctrl-C: the partial result is written, marked incomplete; exit 130
    results: tuple = ()  # the RunResults, in the order written

    def summary(self) -> dict:
        """What `kvplan stress --json` prints: the files, and per run its verdict and vLLM-keyed metrics."""
        return {"written": [str(p) for p in self.written], "failed": self.failed, "interrupted": self.interrupted,
                "runs": [{"allocator": r.allocator, "verdict": r.verdict, "complete": r.complete,
                          "metrics": dict(r.metrics), "prediction": dict(r.prediction)} for r in self.results]}


def _save_elsewhere(run: StressRun, report_text: str, problem: KvplanError) -> KvplanError:
    """The run could not be written where asked: write it to a new temp folder instead, and say both."""
    import tempfile

    from kvplan.stress.command import save_run

    try:
        folder = Path(tempfile.mkdtemp(prefix=f"kvplan-{run.scenario.name}-unsaved-"))
        save_run(run, {Path("report.html"): report_text}, out_dir=folder)
    except (OSError, KvplanError) as exc:
        return KvplanError(f"the run finished but could not be saved ({problem}); nor in a temp folder ({exc}); "
                           "the tables above are all that is left of it")
    return KvplanError(f"the run finished but could not be saved ({problem}); saved it to {folder} instead")


def stress_and_report(opts: StressOptions, console: Console | None = None) -> StressOutcome:
    """`kvplan stress`: run, print the comparison, then write the result files and report.html
    together (all or none); a failed run is written all the same (its result is evidence). A run
    that cannot be written where asked is saved to a temp folder and reported as an error."""
    from kvplan.files import sigint_deferred
    from kvplan.report.html import render_report
    from kvplan.report.stress_view import render_allocators, render_comparison, render_failure
    from kvplan.stress.command import run_stress, save_run

    console = console or make_console()
    run = run_stress(opts, console)
    for result in run.results:
        render_comparison(console, result)
    if len(run.results) == 2:
        render_allocators(console, *run.results)
    # the run is over: a (second) Ctrl-C now waits until its result and report are saved
    with sigint_deferred():
        report_text = render_report(list(run.results))
        try:
            written = list(save_run(run, {Path("report.html"): report_text}))
        except KvplanError as exc:
            raise _save_elsewhere(run, report_text, exc) from None
    for path in written:
        console.print(f"wrote {path}")
    failed = [r for r in run.results if r.verdict == "failed"]
    for result in failed:
        render_failure(console, result)
    return StressOutcome(written, bool(failed), run.interrupted, run.results)
