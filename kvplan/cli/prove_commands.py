"""Prove commands: `kvplan serve`, `stress`, `calibrate`, `report`, `gate`, `baseline update`; heavy
imports (torch, matplotlib, jinja2) stay inside the commands."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvplan.cli.app import app, baseline_app, make_console
from kvplan.errors import KvplanError

THREADS_HELP = ("The engine's intra-op CPU threads (default: the cores this process may use, minus those other "
                "processes keep busy; OMP_NUM_THREADS when set).")


@app.command()
def serve(
    model: Annotated[str, typer.Option("--model", "-m", help="Profile name (random weights) or a local model directory.")],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    served_model_name: Annotated[Optional[str], typer.Option(help="Model name in the API (default: --model).")] = None,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block.")] = 16,
    max_num_seqs: Annotated[int, typer.Option(help="Most sequences per step.")] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option(help="Token budget per step.")] = 2048,
    max_model_len: Annotated[Optional[int], typer.Option(help="Context limit (default: the model's).")] = None,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto, float16, bfloat16, float32, fp8, int8.")] = "auto",
    kv_cache_memory_bytes: Annotated[Optional[int], typer.Option(help="KV pool bytes (CPU default 256 MiB).")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="CUDA: fraction of device memory the engine may use.")] = 0.9,
    num_gpu_blocks_override: Annotated[Optional[int], typer.Option(help="Pool size in blocks (wins over the byte budget).")] = None,
    enable_prefix_caching: Annotated[bool, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching")] = False,
    device: Annotated[str, typer.Option(help="cpu or cuda[:N].")] = "cpu",
    dtype: Annotated[str, typer.Option(help="Model dtype: auto, float32, float16, bfloat16.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of the random weights (profiles) and of sampling.")] = 0,
    access_log: Annotated[bool, typer.Option("--access-log/--no-access-log", help="One log line per request on stderr.")] = True,
    api_key: Annotated[Optional[str], typer.Option(envvar="KVPLAN_API_KEY", show_default=False, help="Require `Authorization: Bearer <key>` on every route but /health and /metrics (the flag wins over the env var; prefer the env var: flags show in `ps`).")] = None,
    header_timeout_s: Annotated[float, typer.Option(help="Seconds a client has to send a request's line and headers (then 408 and close).")] = 10.0,
    body_timeout_s: Annotated[float, typer.Option(help="Seconds a client has to send a request's body once its headers are in (then 408).")] = 30.0,
    max_request_bytes: Annotated[int, typer.Option(help="Largest request body (larger: 413).")] = 16 * 2**20,
    max_connections: Annotated[int, typer.Option(help="Open connections at most; over it the one idle the longest is closed.")] = 4096,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help=THREADS_HELP)] = None,
) -> None:
    """Serve the bundled engine behind an OpenAI-compatible API (/v1/completions, /v1/chat/completions,
    /v1/models, /health, /metrics with vLLM's names)."""
    if not 0 < port < 65536:
        raise KvplanError(f"--port must be in 1..65535, got {port}")
    # kvplan.server.limits is import-light: the door's flags are checked before the torch import
    from kvplan.server.limits import ServeLimits

    limits = ServeLimits(api_key=api_key, header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s,
                         max_request_bytes=max_request_bytes, max_connections=max_connections)
    from kvplan.spec.profiles import load_model

    load_model(model)  # a bad name or path fails here, before the seconds-long torch import
    from kvplan.engine import EngineConfig
    from kvplan.server.serve import serve as run_serve

    config = EngineConfig(block_size=block_size, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype,
                          kv_cache_memory_bytes=kv_cache_memory_bytes, gpu_memory_utilization=gpu_memory_utilization,
                          enable_prefix_caching=enable_prefix_caching, device=device, dtype=dtype,
                          num_gpu_blocks_override=num_gpu_blocks_override, seed=seed, num_threads=threads)
    run_serve(model, config, host=host, port=port, served_model_name=served_model_name, seed=seed,
              access_log=access_log, limits=limits)


@app.command()
def stress(
    scenario: Annotated[Path, typer.Option("--scenario", "-s", help="A scenario YAML file, or a bundled scenario by name (`kvplan scenarios` lists them).")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Output folder (default: a new reports/<scenario>/<UTC time>, linked as reports/<scenario>/latest).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the run already in --out.")] = False,
    allocator: Annotated[str, typer.Option(help="paged, contiguous, or both (same KV memory, side by side).")] = "paged",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    calibration: Annotated[Optional[Path], typer.Option(help="Cost-model file from `kvplan calibrate` (default: profiles/calibration/).")] = None,
    recalibrate: Annotated[bool, typer.Option("--calibrate", help="Calibrate the cost model right before the run (same machine state), and store it.")] = False,
    target: Annotated[Optional[str], typer.Option(help="An OpenAI-compatible server, e.g. http://127.0.0.1:8000.")] = None,
    api: Annotated[str, typer.Option(help="With --target: completions or chat.")] = "completions",
    served_model_name: Annotated[Optional[str], typer.Option(help="With --target: the model name the server serves.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="With --target: environment variable holding the API key.")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="With --target: per-request timeout.")] = 120.0,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help=THREADS_HELP)] = None,
    server_kind: Annotated[str, typer.Option("--server-kind", help="With --target: auto (ask the server what it accepts), vllm, sglang, tgi or openai.")] = "auto",
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="With --target: the server's tokenizer (a local directory or a repo in the Hugging Face cache; offline) for text prompts of the scenario's exact length.")] = None,
    output_format: Annotated[str, typer.Option("--format", help="kvplan, or vllm: also write result.vllm.json with the keys and per-request arrays of `vllm bench serve --save-result`.")] = "kvplan",
) -> None:
    """Run a scenario on the bundled engine (or a server) and compare with the prediction made first."""
    from kvplan.report.stress_view import stress_and_report
    from kvplan.stress.command import StressOptions

    outcome = stress_and_report(StressOptions(scenario, out_dir=out, allocator=allocator, progress=not no_progress,  # type: ignore[arg-type]
                                    calibration=calibration, recalibrate=recalibrate, target=target, api=api,
                                    served_model_name=served_model_name, api_key_env=api_key_env, timeout_s=timeout_s,
                                    force=force, server_kind=server_kind, tokenizer=tokenizer, output_format=output_format,
                                    threads=threads))
    if outcome.failed:
        raise typer.Exit(1)  # written, but failed: CI must see it


@app.command()
def scenarios() -> None:
    """List the bundled scenarios (`kvplan stress --scenario NAME` runs one)."""
    from rich.table import Table

    from kvplan.stress.scenario_loader import bundled_scenarios, load_scenario

    t = Table(title="bundled scenarios", header_style="bold")
    for col in ("name", "model", "requests", "description"):
        t.add_column(col)
    for name in bundled_scenarios():
        s = load_scenario(name)
        n = str(s.num_requests) if s.num_requests is not None else f"{s.duration_s:g} s"
        t.add_row(name, s.model.name, n, s.description)
    make_console().print(t)


@app.command()
def calibrate(
    scenario: Annotated[Optional[Path], typer.Option("--scenario", "-s", help="Calibrate with this scenario's model and engine settings.")] = None,
    model: Annotated[str, typer.Option("--model", "-m", help="Without --scenario: the profile to time (random weights).")] = "tiny-llama",
    device: Annotated[str, typer.Option(help="Without --scenario: cpu or cuda.")] = "cpu",
    out: Annotated[Optional[Path], typer.Option(help="Where to store the fit (default: the user's data folder, calibration/NAME-DEVICE.yaml).")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help=THREADS_HELP)] = None,
    force: Annotated[bool, typer.Option("--force", help="Store the fit even when its R² is below the quality threshold.")] = False,
) -> None:
    """Time engine steps on this machine and store the per-step cost model `kvplan stress` predicts with."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from kvplan.report.calibration_view import render_fit
    from kvplan.spec.profiles import load_model
    from kvplan.stress.calibrate import calibrate as run_calibrate
    from kvplan.stress.calibrate import calibrate_scenario, calibration_path, fit_problem

    if scenario is not None:
        from kvplan.stress.scenario_loader import load_scenario

        sc = load_scenario(scenario)
        name, model, device = sc.name, sc.model.name, sc.engine.device
    else:
        sc, name = None, load_model(model).name
        model = name
    path = out or calibration_path(name, device)
    console = make_console()
    columns = (TextColumn(f"timing {model} steps"), BarColumn(), MofNCompleteColumn(), TextColumn("rounds"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("calibrate", total=None)
        progress = lambda i, n: bar.update(task, completed=i, total=n)  # noqa: E731
        if sc is not None:
            fit = calibrate_scenario(sc, progress, threads=threads)
        else:
            from kvplan.engine import EngineConfig

            config = EngineConfig(kv_cache_memory_bytes=512 * 2**20, max_model_len=4096, max_num_batched_tokens=2048,
                                  device=device, num_threads=threads)
            fit = run_calibrate(model, config, on_progress=progress)
    problem = fit_problem(fit)
    render_fit(console, fit, problem)
    if problem and not force:
        console.print(f"[bold red]not stored[/bold red]: {problem}; step times this scattered would mislead every "
                      "prediction. Rerun on a quieter machine, or pass --force to store it anyway.")
        raise typer.Exit(1)
    fit.save(path)
    console.print(f"wrote {path}" + (" [yellow](stored with --force despite the poor fit)[/yellow]" if problem else ""))


@app.command()
def report(
    results: Annotated[list[Path], typer.Argument(help="result.json files; both allocators of one scenario are shown side by side.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="HTML file (default: report.html beside the first result).")] = None,
) -> None:
    """Self-contained HTML report: prediction vs measurement, KV memory, load, latency CDFs, goodput."""
    from kvplan.report.html import write_report
    from kvplan.stress.result import load_result

    loaded = [load_result(p) for p in results]
    path = write_report(loaded, out or results[0].parent / "report.html")
    typer.echo(f"kvplan: wrote {path} ({path.stat().st_size / 1e6:.2f} MB)", err=True)


@app.command()
def gate(
    result: Annotated[Path, typer.Option("--result", "-r", help="The result.json to check.")],
    baseline: Annotated[Optional[Path], typer.Option("--baseline", "-b", help="Baseline result (default: reports/baselines/SCENARIO.json).")] = None,
    junit: Annotated[Optional[Path], typer.Option("--junit", help="Also write the checks as JUnit XML here.")] = None,
    html: Annotated[Optional[Path], typer.Option("--html", help="Also write the verdict as an HTML page here.")] = None,
    tolerance: Annotated[Optional[list[str]], typer.Option("--tolerance", "-t", help="NAME=+15% or NAME=exact, vs the baseline; repeatable; overrides the scenario's gate block.")] = None,
    prediction_tolerance: Annotated[Optional[list[str]], typer.Option("--prediction-tolerance", help="NAME=2%, measured vs predicted; repeatable.")] = None,
) -> None:
    """Compare a result with its baseline and its prediction: exit 0 pass, 1 regression, 2 bad input."""
    from kvplan.report.baseline import baseline_path
    from kvplan.report.gate import run_gate, write_gate_html, write_junit
    from kvplan.report.gate_view import render_gate
    from kvplan.stress.result import load_result

    current = load_result(result)
    if baseline is None:
        baseline = baseline_path(current)
        if not baseline.exists():
            raise KvplanError(f"no baseline {baseline} for scenario {current.scenario_name!r}; pass --baseline or "
                              f"create it with `kvplan baseline update {result}`")
    verdict = run_gate(load_result(baseline), current, tolerance=tolerance or [], prediction_tolerance=prediction_tolerance or [],
                       baseline_where=str(baseline), result_where=str(result))
    render_gate(make_console(), verdict, baseline_where=str(baseline), result_where=str(result))
    if junit is not None:
        write_junit(verdict, junit)
    if html is not None:
        write_gate_html(verdict, html, baseline_where=str(baseline), result_where=str(result))
    if not verdict.passed:
        raise typer.Exit(1)  # main() returns click's exit code: 1 = regression, distinct from 2 = bad input


@baseline_app.command("update")
def baseline_update(
    result: Annotated[Path, typer.Argument(help="A complete result.json to make the baseline of its scenario.")],
    baselines_dir: Annotated[Path, typer.Option("--dir", help="Baselines directory.")] = Path("reports/baselines"),
    force: Annotated[bool, typer.Option("--force", help="Store it even if it fails its gate against the current baseline.")] = False,
) -> None:
    """Copy RESULT.json to reports/baselines/SCENARIO.json (validated, gated, atomic); commit it afterwards."""
    from kvplan.report.baseline import update_baseline

    done = update_baseline(result, baselines_dir, force=force)
    was = f" (replaced the baseline of commit {done.previous_commit[:12]})" if done.previous_commit else (" (replaced)" if done.replaced else "")
    typer.echo(f"kvplan: baseline {done.path}{was}; commit it to make it the reference", err=True)


