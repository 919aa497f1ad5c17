"""Prove commands: `kvplan serve`, `scenarios`, `calibrate`, `report` (`stress` is in stress_command.py,
`gate` and `baseline` in gate_commands.py); heavy imports (torch, matplotlib, jinja2) stay inside the commands."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvplan.cli.app import app, json_safe, make_console
from kvplan.cli.options import AsJson, Threads
from kvplan.errors import KvplanError


@app.command("serve")
def serve_command(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Profile name (random weights) or a local model directory.")
    ],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    served_model_name: Annotated[str | None, typer.Option(help="Model name in the API (default: --model).")] = None,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block.")] = 16,
    max_num_seqs: Annotated[int, typer.Option(help="Most sequences per step.")] = 256,
    max_num_batched_tokens: Annotated[int, typer.Option(help="Token budget per step.")] = 2048,
    max_model_len: Annotated[int | None, typer.Option(help="Context limit (default: the model's).")] = None,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto, float16, bfloat16, float32, fp8, int8.")] = "auto",
    kv_cache_memory_bytes: Annotated[int | None, typer.Option(help="KV pool bytes (CPU default 256 MiB).")] = None,
    gpu_memory_utilization: Annotated[
        float, typer.Option(help="CUDA: fraction of device memory the engine may use.")
    ] = 0.9,
    num_gpu_blocks_override: Annotated[
        int | None, typer.Option(help="Pool size in blocks (wins over the byte budget).")
    ] = None,
    enable_prefix_caching: Annotated[
        bool, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching", metavar="")
    ] = False,
    device: Annotated[str, typer.Option(help="cpu or cuda[:N].")] = "cpu",
    dtype: Annotated[str, typer.Option(help="Model dtype: auto, float32, float16, bfloat16.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of the random weights (profiles) and of sampling.")] = 0,
    access_log: Annotated[
        bool, typer.Option("--access-log/--no-access-log", help="One log line per request on stderr.", metavar="")
    ] = True,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="KVPLAN_API_KEY",
            show_default=False,
            help="Require `Authorization: Bearer <key>` on every route but /health and /metrics (the flag wins over "
                "the env var; prefer the env var or --api-key-file: flags show in `ps`).",
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(help="Read the API key from this file's first line (not shown in `ps`, unlike --api-key)."),
    ] = None,
    header_timeout_s: Annotated[
        float, typer.Option(help="Seconds a client has to send a request's line and headers (then 408 and close).")
    ] = 10.0,
    body_timeout_s: Annotated[
        float, typer.Option(help="Seconds a client has to send a request's body once its headers are in (then 408).")
    ] = 30.0,
    max_request_bytes: Annotated[int, typer.Option(help="Largest request body (larger: 413).")] = 16 * 2**20,
    max_connections: Annotated[
        int, typer.Option(help="Open connections at most; over it the one idle the longest is closed.")
    ] = 4096,
    threads: Threads = None,
) -> None:
    """Serve the bundled engine behind an OpenAI-compatible API (/v1/completions, /v1/chat/completions,
    /v1/models, /health, /metrics with vLLM's names)."""
    if not 0 < port < 65536:
        raise KvplanError(f"--port must be in 1..65535, got {port}")
    # kvplan.server.limits is import-light: the door's flags are checked before the torch import
    from kvplan.server.limits import ServeLimits, read_api_key_file

    if api_key_file is not None:
        api_key = read_api_key_file(api_key_file)

    limits = ServeLimits(api_key=api_key, header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s,
                         max_request_bytes=max_request_bytes, max_connections=max_connections)
    from kvplan.spec.profiles import load_model

    load_model(model)  # a bad name or path fails here, before the seconds-long torch import
    from kvplan.engine import EngineConfig
    from kvplan.server.serve import serve as run_serve

    config = EngineConfig(
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        kv_cache_dtype=kv_cache_dtype,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        enable_prefix_caching=enable_prefix_caching,
        device=device,
        dtype=dtype,
        num_gpu_blocks_override=num_gpu_blocks_override,
        seed=seed,
        num_threads=threads,
    )
    run_serve(model, config, host=host, port=port, served_model_name=served_model_name, seed=seed,
              access_log=access_log, limits=limits)


@app.command()
def scenarios(
    action: Annotated[
        str | None,
        typer.Argument(
            help="show NAME: print one scenario (its YAML; --json: its resolved settings).", metavar="[show]"
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Argument(help="A bundled scenario's name or a scenario file.", metavar="[NAME]")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """List the bundled scenarios (`kvplan stress --scenario NAME` runs one), or show one."""
    from rich.table import Table

    from kvplan.stress.scenario_loader import bundled_scenarios, load_scenario, scenario_file

    if action is not None and action != "show":
        raise KvplanError(f"kvplan scenarios takes no argument (a list) or show NAME, got {action!r}")
    if action == "show":
        if not name:
            raise KvplanError(
                f"kvplan scenarios show needs a NAME: one of {', '.join(bundled_scenarios())}, or a scenario file"
            )
        scenario = load_scenario(name)  # validated first: a bad file is one line, as in stress
        if as_json:
            typer.echo(scenario.model_dump_json())
        else:
            typer.echo(scenario_file(name).read_text().rstrip("\n"))
        return
    rows: list[dict[str, Any]] = []
    for scenario_name in bundled_scenarios():
        s = load_scenario(scenario_name)
        rows.append({"name": scenario_name, "model": s.model.name, "num_requests": s.num_requests,
                     "duration_s": s.duration_s, "description": s.description})
    if as_json:
        typer.echo(json.dumps(rows))
        return
    t = Table(title="bundled scenarios", header_style="bold")
    for col in ("name", "model", "requests", "description"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"],
            r["model"],
            str(r["num_requests"]) if r["num_requests"] is not None else f"{r['duration_s']:g} s",
            r["description"],
        )
    make_console().print(t)


@app.command("calibrate")
def calibrate_command(
    scenario: Annotated[
        Path | None, typer.Option("--scenario", "-s", help="Calibrate with this scenario's model and engine settings.")
    ] = None,
    model: Annotated[
        str, typer.Option("--model", "-m", help="Without --scenario: the profile to time (random weights).")
    ] = "tiny-llama",
    device: Annotated[str, typer.Option(help="Without --scenario: cpu or cuda.")] = "cpu",
    out: Annotated[
        Path | None,
        typer.Option(help="Where to store the fit (default: the user's data folder, calibration/NAME-DEVICE.yaml)."),
    ] = None,
    threads: Threads = None,
    force: Annotated[
        bool, typer.Option("--force", help="Store the fit even when its R² is below the quality threshold.", metavar="")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the fit as one JSON object on stdout (file, stored, problem, coefficients); the rest goes to "
                "stderr.",
            metavar="",
        ),
    ] = False,
) -> None:
    """Time engine steps on this machine and store the per-step cost model `kvplan stress` predicts with."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

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
    from kvplan.files import check_output_path

    path = check_output_path(out or calibration_path(name, device))
    console = make_console(stderr=as_json)
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
    stored = not problem or force
    if as_json:
        import dataclasses
        import json

        scalars = {k: v for k, v in dataclasses.asdict(fit).items() if not isinstance(v, (list, tuple))}
        answer = {"path": str(path), "stored": stored, "problem": problem, "fit": scalars}
        typer.echo(json.dumps(json_safe(answer), default=str))
    if problem and not force:
        console.print(f"[bold red]not stored[/bold red]: {problem}; step times this scattered would mislead every "
                      "prediction. Rerun on a quieter machine, or pass --force to store it anyway.")
        raise typer.Exit(1)
    fit.save(path)
    console.print(f"wrote {path}" + (" [yellow](stored with --force despite the poor fit)[/yellow]" if problem else ""))


@app.command()
def report(
    results: Annotated[
        list[Path], typer.Argument(help="result.json files; both allocators of one scenario are shown side by side.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="HTML file (default: report.html beside the first result).")
    ] = None,
    merge: Annotated[
        bool, typer.Option("--merge", help="The results are hosts that drove one server with the same scenario "
                           "(disjoint seeds): write them as one run, result-merged.json beside the report.")
    ] = False,
) -> None:
    """Self-contained HTML report: prediction vs measurement, KV memory, load, latency CDFs, goodput."""
    from kvplan.files import check_output_path, write_files
    from kvplan.report.html import render_report, write_report
    from kvplan.results.merge import merge_results
    from kvplan.results.result import load_result

    target = check_output_path(out or results[0].parent / "report.html", inputs=results)  # never over an input
    loaded = [load_result(p) for p in results]
    if not merge:
        path = write_report(loaded, target)
        typer.echo(f"kvplan: wrote {path} ({path.stat().st_size / 1e6:.2f} MB)", err=True)
        return
    merged = merge_results(loaded, [str(p) for p in results])
    merged_path = check_output_path(target.with_name("result-merged.json"), inputs=results)
    for path in write_files({merged_path: merged.to_json(), target: render_report([merged])}):
        typer.echo(f"kvplan: wrote {path}", err=True)
