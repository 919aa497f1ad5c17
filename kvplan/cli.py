"""The `kvplan` command line. Commands stay thin; heavy modules (torch, transformers) are
imported inside the commands that need them so `kvplan --help` and `kvplan estimate` stay fast.

Every user mistake is a `KvplanError` (or a click usage error): one line on stderr, exit code 2,
no traceback unless `--debug`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvplan.errors import KvplanError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Plan and prove KV-cache memory for LLM serving.")
profiles_app = typer.Typer(add_completion=False, help="Bundled model profiles.", invoke_without_command=True)
app.add_typer(profiles_app, name="profiles")


def _console():
    from rich.console import Console

    return Console()


@app.command()
def estimate(
    model: Annotated[str, typer.Option("--model", "-m", help="Profile name or alias, a config.json, or a model directory.")],
    ctx: Annotated[int, typer.Option(help="Tokens per request (prompt + output).")] = 4096,
    concurrency: Annotated[int, typer.Option(help="Concurrent requests.")] = 1,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto, float16, bfloat16, float32, fp8, fp8_e4m3, fp8_e5m2, int8, int4.")] = "auto",
    block_size: Annotated[int, typer.Option(help="Tokens per KV block (vLLM default 16).")] = 16,
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size", help="Tensor-parallel size.")] = 1,
    pp: Annotated[int, typer.Option("--pp", "--pipeline-parallel-size", help="Pipeline-parallel size.")] = 1,
    dtype: Annotated[str, typer.Option(help="Model dtype: auto (the checkpoint's), float16, bfloat16, float32.")] = "auto",
    prefix_tokens: Annotated[int, typer.Option(help="Tokens of a prefix shared by all requests.")] = 0,
    max_model_len: Annotated[Optional[int], typer.Option(help="Context each contiguous request reserves (default: the model's).")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU from the catalog (see `kvplan gpus`).")] = None,
    gpu_memory_gib: Annotated[Optional[float], typer.Option(help="Total GPU memory as CUDA reports it, in GiB.")] = None,
    gpu_memory_utilization: Annotated[Optional[float], typer.Option(help="Fraction of GPU memory the engine may use (vLLM default 0.9).")] = None,
    quantization: Annotated[Optional[str], typer.Option(help="Runtime weight quantization of an unquantized checkpoint (e.g. fp8).")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(help="vLLM --max-num-seqs (default chosen by GPU memory, as vLLM).")] = None,
    max_num_batched_tokens: Annotated[Optional[int], typer.Option(help="vLLM --max-num-batched-tokens (default by GPU memory).")] = None,
    kv_cache_memory_bytes: Annotated[Optional[int], typer.Option(help="KV cache bytes per GPU; bypasses --gpu-memory-utilization, as in vLLM.")] = None,
    enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs (vLLM --enforce-eager).")] = False,
    vllm_version: Annotated[Optional[str], typer.Option(help="vLLM version whose behaviour to model (default: the newest modelled).")] = None,
    target_concurrency: Annotated[Optional[int], typer.Option(help="Print the `vllm serve` line that serves N requests of max_model_len (default: --ctx).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """KV-cache bytes per token, request and batch; with a GPU, vLLM's capacity plan and whether it fits."""
    from kvplan.plan.estimate import estimate as run_estimate
    from kvplan.plan.estimate import to_json

    _check_estimate_flags(gpu, gpu_memory_gib, max_model_len, ctx=ctx, concurrency=concurrency, block_size=block_size,
                          tp=tp, pp=pp)
    spec, device = _estimate_model_and_gpu(model, dtype, gpu, gpu_memory_gib)
    if target_concurrency and max_model_len is None:
        max_model_len = ctx  # "N requests of --ctx tokens": serve with that context, not the model's maximum
    engine_args = _engine_args(device, gpu_memory_utilization, tp, pp, dtype, quantization, kv_cache_dtype, block_size,
                               max_model_len, max_num_seqs, max_num_batched_tokens, kv_cache_memory_bytes,
                               enforce_eager, vllm_version, target_concurrency)
    est = run_estimate(spec, ctx_tokens=ctx, concurrency=concurrency, kv_cache_dtype=kv_cache_dtype,
                       block_size=block_size, tp=tp, pp=pp, prefix_tokens=prefix_tokens,
                       max_model_len=max_model_len, gpu=device,
                       gpu_memory_utilization=0.9 if gpu_memory_utilization is None else gpu_memory_utilization,
                       engine_args=engine_args)
    capacity = est.fit.capacity if est.fit else None
    fixes, rec = (), None
    if capacity is not None and engine_args is not None:
        from kvplan.plan.fixes import fixes_for, recommend

        fixes = fixes_for(spec, engine_args, capacity, target_concurrency)
        rec = recommend(spec, engine_args, target_concurrency) if target_concurrency else None
    for warning in est.warnings:
        typer.echo(f"kvplan: warning: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps(to_json(est, fixes, rec), indent=2))
        return
    from kvplan.report.capacity_view import render_fixes, render_recommendation
    from kvplan.report.estimate_view import render_estimate

    console = _console()
    render_estimate(console, est)
    render_fixes(console, fixes)
    if rec is not None:
        render_recommendation(console, rec)


def _check_estimate_flags(gpu: str | None, gpu_memory_gib: float | None, max_model_len: int | None,
                          **sizes: int) -> None:
    """Contradictory or non-positive flags of `estimate`, rejected before any profile is read."""
    if gpu and gpu_memory_gib is not None:
        raise KvplanError("give either --gpu or --gpu-memory-gib, not both")
    for name, value in sizes.items():
        if value <= 0:
            raise KvplanError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if max_model_len is not None and max_model_len <= 0:
        raise KvplanError(f"--max-model-len must be positive, got {max_model_len}")


def _estimate_model_and_gpu(model: str, dtype: str, gpu: str | None, gpu_memory_gib: float | None):
    """The model spec (served in `dtype`) and the GPU: a catalog name, a bare size, or none."""
    from dataclasses import replace

    from kvplan.spec.dtypes import normalize_model_dtype
    from kvplan.spec.gpu import custom_gpu, load_gpu
    from kvplan.spec.profiles import load_model

    spec = load_model(model)
    if dtype != "auto":
        spec = replace(spec, dtype=normalize_model_dtype(dtype))
    device = load_gpu(gpu) if gpu else (custom_gpu(gpu_memory_gib) if gpu_memory_gib is not None else None)
    return spec, device


def _engine_args(device, gpu_memory_utilization, tp, pp, dtype, quantization, kv_cache_dtype, block_size, max_model_len,
                 max_num_seqs, max_num_batched_tokens, kv_cache_memory_bytes, enforce_eager, vllm_version,
                 target_concurrency):
    """The vLLM engine arguments of `estimate` (None without a GPU); checks contradictions."""
    from kvplan.plan.budget import EngineArgs
    from kvplan.plan.overheads import DEFAULT_VLLM_VERSION

    if kv_cache_memory_bytes is not None and gpu_memory_utilization is not None:
        raise KvplanError("give either --kv-cache-memory-bytes or --gpu-memory-utilization, not both "
                          "(vLLM ignores the utilization when the KV bytes are given)")
    if kv_cache_memory_bytes is not None and kv_cache_memory_bytes < 0:
        raise KvplanError(f"--kv-cache-memory-bytes must be >= 0, got {kv_cache_memory_bytes}")
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise KvplanError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    if target_concurrency is not None and target_concurrency <= 0:
        raise KvplanError(f"--target-concurrency must be positive, got {target_concurrency}")
    if device is None:
        given = [f for f, v in (("--kv-cache-memory-bytes", kv_cache_memory_bytes), ("--target-concurrency", target_concurrency),
                                ("--max-num-seqs", max_num_seqs), ("--max-num-batched-tokens", max_num_batched_tokens),
                                ("--quantization", quantization), ("--vllm-version", vllm_version)) if v is not None]
        if given or enforce_eager:
            raise KvplanError(f"{(given or ['--enforce-eager'])[0]} needs a GPU: add --gpu NAME or --gpu-memory-gib X")
        return None
    return EngineArgs(gpu=device, gpu_memory_utilization=0.9 if gpu_memory_utilization is None else gpu_memory_utilization,
                      tensor_parallel_size=tp, pipeline_parallel_size=pp, dtype=dtype, quantization=quantization,
                      kv_cache_dtype=kv_cache_dtype, block_size=block_size, max_model_len=max_model_len,
                      max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                      kv_cache_memory_bytes=kv_cache_memory_bytes, enforce_eager=enforce_eager,
                      vllm_version=vllm_version or DEFAULT_VLLM_VERSION)


def _int_list(flag: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise KvplanError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise KvplanError(f"{flag} takes positive integers, got {text!r}")
    return values


@app.command()
def sweep(
    model: Annotated[str, typer.Option("--model", "-m", help="Profile name or alias, a config.json, or a model directory.")],
    ctx: Annotated[str, typer.Option(help="Comma-separated contexts (max_model_len).")] = "1024,2048,4096,8192,16384,32768",
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrencies.")] = "1,8,32,128",
    kv_cache_dtype: Annotated[str, typer.Option(help="Comma-separated KV dtypes.")] = "auto,fp8",
    block_size: Annotated[str, typer.Option(help="Comma-separated block sizes.")] = "16",
    gpu: Annotated[str, typer.Option(help="Comma-separated catalog GPUs.")] = "h100",
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size")] = 1,
    pp: Annotated[int, typer.Option("--pp", "--pipeline-parallel-size")] = 1,
    dtype: Annotated[str, typer.Option()] = "auto",
    gpu_memory_utilization: Annotated[float, typer.Option()] = 0.9,
    vllm_version: Annotated[Optional[str], typer.Option()] = None,
    csv_path: Annotated[Optional[str], typer.Option("--csv", help="Write the table as CSV here.")] = None,
    plot_path: Annotated[Optional[str], typer.Option("--plot", help="Write a PNG of max concurrency vs context per KV dtype.")] = None,
) -> None:
    """vLLM capacity over a grid of ctx x concurrency x KV dtype x block size x GPU (pandas table)."""
    from kvplan.plan.budget import EngineArgs
    from kvplan.plan.overheads import DEFAULT_VLLM_VERSION
    from kvplan.plan.sweep import plot_concurrency
    from kvplan.plan.sweep import sweep as run_sweep
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    spec = load_model(model)
    base = EngineArgs(gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      dtype=dtype, vllm_version=vllm_version or DEFAULT_VLLM_VERSION)
    df = run_sweep(spec, ctx_tokens=_int_list("--ctx", ctx), concurrency=_int_list("--concurrency", concurrency),
                   kv_cache_dtypes=[k.strip() for k in kv_cache_dtype.split(",") if k.strip()],
                   block_sizes=_int_list("--block-size", block_size),
                   gpus=[load_gpu(g.strip()) for g in gpu.split(",") if g.strip()], base=base)
    if csv_path:
        df.to_csv(csv_path, index=False)
        typer.echo(f"kvplan: wrote {len(df):,} rows to {csv_path}", err=True)
    if plot_path:
        plot_concurrency(df, plot_path, title=f"{spec.name}: vLLM max concurrency")
        typer.echo(f"kvplan: wrote {plot_path}", err=True)
    import pandas as pd

    with pd.option_context("display.max_rows", 60, "display.width", 200):
        typer.echo(df.to_string(index=False, max_rows=60))


@app.command()
def gpus(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the GPU catalog (memory as marketed and as CUDA sees it, bandwidth, throughput)."""
    from kvplan.report.catalog_view import render_gpus
    from kvplan.spec.gpu import gpu_catalog

    catalog = gpu_catalog()
    if as_json:
        typer.echo(json.dumps([g.__dict__ for g in catalog.values()], indent=2, default=list))
        return
    render_gpus(_console(), list(catalog.values()))


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
) -> None:
    """Serve the bundled engine behind an OpenAI-compatible API (/v1/completions, /v1/chat/completions,
    /v1/models, /health, /metrics with vLLM's names)."""
    if not 0 < port < 65536:
        raise KvplanError(f"--port must be in 1..65535, got {port}")
    from kvplan.spec.profiles import load_model

    load_model(model)  # a bad name or path fails here, before the seconds-long torch import
    from kvplan.engine import EngineConfig
    from kvplan.server.serve import serve as run_serve

    config = EngineConfig(block_size=block_size, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype,
                          kv_cache_memory_bytes=kv_cache_memory_bytes, gpu_memory_utilization=gpu_memory_utilization,
                          enable_prefix_caching=enable_prefix_caching, device=device, dtype=dtype,
                          num_gpu_blocks_override=num_gpu_blocks_override, seed=seed)
    run_serve(model, config, host=host, port=port, served_model_name=served_model_name, seed=seed)


@profiles_app.callback()
def profiles_list(ctx: typer.Context) -> None:
    """List bundled model profiles (`kvplan profiles show NAME` prints one)."""
    if ctx.invoked_subcommand is not None:
        return
    from kvplan.report.catalog_view import render_profiles
    from kvplan.spec.profiles import load_model, model_names

    render_profiles(_console(), [load_model(n) for n in model_names()])


@profiles_app.command("show")
def profiles_show(name: str, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print one profile: its source, the parsed spec and the raw config."""
    from kvplan.report.catalog_view import render_profile
    from kvplan.spec.profiles import load_model, model_profile

    spec = load_model(name)
    if as_json:
        typer.echo(json.dumps(model_profile(spec.name), indent=2))
        return
    render_profile(_console(), spec)


@app.command()
def stress(
    scenario: Annotated[Path, typer.Option("--scenario", "-s", help="Scenario YAML (see scenarios/).")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Output directory (default reports/<scenario name>).")] = None,
    allocator: Annotated[str, typer.Option(help="paged, contiguous, or both (same KV memory, side by side).")] = "paged",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    calibration: Annotated[Optional[Path], typer.Option(help="Cost-model file from `kvplan calibrate` (default: profiles/calibration/).")] = None,
    recalibrate: Annotated[bool, typer.Option("--calibrate", help="Calibrate the cost model right before the run (same machine state), and store it.")] = False,
    target: Annotated[Optional[str], typer.Option(help="An OpenAI-compatible server, e.g. http://127.0.0.1:8000.")] = None,
    api: Annotated[str, typer.Option(help="With --target: completions or chat.")] = "completions",
    served_model_name: Annotated[Optional[str], typer.Option(help="With --target: the model name the server serves.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="With --target: environment variable holding the API key.")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="With --target: per-request timeout.")] = 120.0,
) -> None:
    """Run a scenario on the bundled engine (or a server) and compare with the prediction made first."""
    from kvplan.report.stress_view import stress_and_report
    from kvplan.stress.command import StressOptions

    stress_and_report(StressOptions(scenario, out_dir=out, allocator=allocator, progress=not no_progress,  # type: ignore[arg-type]
                                    calibration=calibration, recalibrate=recalibrate, target=target, api=api,
                                    served_model_name=served_model_name, api_key_env=api_key_env, timeout_s=timeout_s))


@app.command()
def calibrate(
    scenario: Annotated[Optional[Path], typer.Option("--scenario", "-s", help="Calibrate with this scenario's model and engine settings.")] = None,
    model: Annotated[str, typer.Option("--model", "-m", help="Without --scenario: the profile to time (random weights).")] = "tiny-llama",
    device: Annotated[str, typer.Option(help="Without --scenario: cpu or cuda.")] = "cpu",
    out: Annotated[Optional[Path], typer.Option(help="Where to store the fit (default profiles/calibration/NAME-DEVICE.yaml).")] = None,
) -> None:
    """Time engine steps on this machine and store the per-step cost model `kvplan stress` predicts with."""
    from rich.console import Console
    from rich.progress import Progress

    from kvplan.spec.profiles import load_model
    from kvplan.stress.calibrate import calibrate as run_calibrate
    from kvplan.stress.calibrate import calibrate_scenario, calibration_path

    if scenario is not None:
        from kvplan.stress.scenario_loader import load_scenario

        sc = load_scenario(scenario)
        name, model, device = sc.name, sc.model.name, sc.engine.device
    else:
        sc, name = None, load_model(model).name
        model = name
    path = out or calibration_path(name, device)
    console = Console()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"timing {model} steps", total=None)
        progress = lambda i, n: bar.update(task, completed=i, total=n)  # noqa: E731
        fit = calibrate_scenario(sc, progress) if sc is not None else run_calibrate(model, on_progress=progress)
    fit.save(path)
    console.print(f"step_s = {fit.intercept_s * 1e3:.3f} ms + {fit.per_token_s * 1e6:.2f} us/token + "
                  f"{fit.per_seq_s * 1e6:.1f} us/seq + {fit.per_context_token_s * 1e9:.1f} ns/context token + "
                  f"{fit.per_attention_pair_s * 1e12:.1f} ps/attention pair  (R² {fit.r2:.3f}, {fit.num_samples} steps)")
    console.print(f"wrote {path}")


# --- report, gate, baseline; heavy imports (matplotlib, jinja2) stay inside --------------
baseline_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Stored baselines that `kvplan gate` compares with.")
app.add_typer(baseline_app, name="baseline")


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
    render_gate(_console(), verdict, baseline_where=str(baseline), result_where=str(result))
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
) -> None:
    """Copy RESULT.json to reports/baselines/SCENARIO.json (validated, atomic); commit it afterwards."""
    from kvplan.report.baseline import update_baseline

    done = update_baseline(result, baselines_dir)
    was = f" (replaced the baseline of commit {done.previous_commit[:12]})" if done.previous_commit else (" (replaced)" if done.replaced else "")
    typer.echo(f"kvplan: baseline {done.path}{was}; commit it to make it the reference", err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user mistakes into one line and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    command = typer.main.get_command(app)
    try:
        rc = command.main(args=args, prog_name="kvplan", standalone_mode=False)
    except KvplanError as exc:
        if debug:
            raise
        typer.echo(f"kvplan: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("kvplan: aborted", err=True)
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: bad option value, missing option, unknown command
        if debug:
            raise
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        typer.echo(f"kvplan: error: {' '.join(message.split())}", err=True)
        sys.exit(2)
    sys.exit(rc if isinstance(rc, int) else 0)
