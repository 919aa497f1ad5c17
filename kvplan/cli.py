"""The `kvplan` command line. Commands stay thin; heavy modules (torch, transformers) are
imported inside the commands that need them so `kvplan --help` and `kvplan estimate` stay fast.

Every user mistake is a `KvplanError` (or a click usage error): one line on stderr, exit code 2,
no traceback unless `--debug`.
"""
from __future__ import annotations

import json
import sys
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
    tp: Annotated[int, typer.Option(help="Tensor-parallel size.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel size.")] = 1,
    dtype: Annotated[str, typer.Option(help="Model dtype: auto (the checkpoint's), float16, bfloat16, float32.")] = "auto",
    prefix_tokens: Annotated[int, typer.Option(help="Tokens of a prefix shared by all requests.")] = 0,
    max_model_len: Annotated[Optional[int], typer.Option(help="Context each contiguous request reserves (default: the model's).")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU from the catalog (see `kvplan gpus`).")] = None,
    gpu_memory_gib: Annotated[Optional[float], typer.Option(help="Total GPU memory as CUDA reports it, in GiB.")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="Fraction of GPU memory the engine may use.")] = 0.9,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """KV-cache bytes per token, request and batch; with a GPU, whether it fits."""
    from dataclasses import replace

    from kvplan.plan.estimate import estimate as run_estimate
    from kvplan.plan.estimate import to_json
    from kvplan.spec.dtypes import normalize_model_dtype
    from kvplan.spec.gpu import custom_gpu, load_gpu
    from kvplan.spec.profiles import load_model

    if gpu and gpu_memory_gib is not None:
        raise KvplanError("give either --gpu or --gpu-memory-gib, not both")
    for flag, value in (("--ctx", ctx), ("--concurrency", concurrency), ("--block-size", block_size), ("--tp", tp), ("--pp", pp)):
        if value <= 0:
            raise KvplanError(f"{flag} must be positive, got {value}")
    if max_model_len is not None and max_model_len <= 0:
        raise KvplanError(f"--max-model-len must be positive, got {max_model_len}")
    spec = load_model(model)
    if dtype != "auto":
        spec = replace(spec, dtype=normalize_model_dtype(dtype))
    device = load_gpu(gpu) if gpu else (custom_gpu(gpu_memory_gib) if gpu_memory_gib is not None else None)
    est = run_estimate(spec, ctx_tokens=ctx, concurrency=concurrency, kv_cache_dtype=kv_cache_dtype,
                       block_size=block_size, tp=tp, pp=pp, prefix_tokens=prefix_tokens,
                       max_model_len=max_model_len, gpu=device, gpu_memory_utilization=gpu_memory_utilization)
    for warning in est.warnings:
        typer.echo(f"kvplan: warning: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps(to_json(est), indent=2))
        return
    from kvplan.report.estimate_view import render_estimate

    render_estimate(_console(), est)


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
