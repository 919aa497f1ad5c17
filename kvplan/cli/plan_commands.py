"""Plan commands: `kvplan estimate`, `sweep`, `gpus`, `profiles`. Pure Python: no torch."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvplan.cli.app import app, make_console, profiles_app
from kvplan.cli.options import (
    AsJson,
    BlockSize,
    Dp,
    Dtype,
    Eager,
    Ep,
    Gpu,
    GpuMemoryGib,
    KvCacheBytes,
    KvDtype,
    MaxBatched,
    MaxModelLen,
    MaxNumSeqs,
    Model,
    Pp,
    Quantization,
    Strict,
    Tp,
    Util,
    Version,
)
from kvplan.cli.server_flags import load_device, load_served_model, mm_limits
from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from kvplan.plan.fixes import Fix

MAX_SWEEP_TOKENS = 2**31  # contexts and concurrencies: vLLM's own int32 limits
MAX_SWEEP_BLOCK_SIZE = 2**16


@app.command("estimate")
def estimate_command(
    model: Model,
    ctx: Annotated[
        int | None, typer.Option(help="Tokens per request (prompt + output); default: --max-model-len, else 4096.")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Concurrent requests.")] = 1,
    kv_cache_dtype: KvDtype = "auto",
    block_size: BlockSize = 16,
    tp: Tp = 1,
    pp: Pp = 1,
    dp: Dp = 1,
    enable_expert_parallel: Ep = False,
    dtype: Dtype = "auto",
    prefix_tokens: Annotated[int, typer.Option(help="Tokens of a prefix shared by all requests.")] = 0,
    max_model_len: MaxModelLen = None,
    gpu: Gpu = None,
    gpu_memory_gib: GpuMemoryGib = None,
    gpu_memory_utilization: Util = None,
    quantization: Quantization = None,
    max_num_seqs: MaxNumSeqs = None,
    max_num_batched_tokens: MaxBatched = None,
    kv_cache_memory_bytes: KvCacheBytes = None,
    enforce_eager: Eager = False,
    vllm_version: Version = None,
    target_concurrency: Annotated[
        int | None, typer.Option(help="Print the `vllm serve` line that serves N requests of max_model_len.")
    ] = None,
    limit_mm_per_prompt: Annotated[
        str | None,
        typer.Option(
            help="vLLM --limit-mm-per-prompt ('{\"image\": 0}' or image=0,video=0): 0 images and videos load no vision "
                "tower."
        ),
    ] = None,
    skip_mm_profiling: Annotated[
        bool,
        typer.Option(
            "--skip-mm-profiling",
            help="vLLM --skip-mm-profiling: the vision tower is loaded but its dummy batch is not profiled.",
            metavar="",
        ),
    ] = False,
    language_model_only: Annotated[
        bool,
        typer.Option(
            "--language-model-only",
            help="vLLM --language-model-only: no vision tower (as image=0,video=0).",
            metavar="",
        ),
    ] = False,
    mm_processor_kwargs: Annotated[
        str | None,
        typer.Option(help="vLLM --mm-processor-kwargs JSON; max_pixels bounds a Qwen-VL image in the profile run."),
    ] = None,
    kv_offloading_size: Annotated[float | None, typer.Option(
        help="Also size vLLM's native CPU tier of this many GiB (--kv-offloading-size, all ranks together): "
             "its blocks and tokens, and how long a block takes to load over the GPU's host link.")] = None,
    as_json: AsJson = False,
    strict: Strict = False,
) -> None:
    """KV-cache bytes per token, request and batch; with a GPU, vLLM's capacity plan and whether it fits."""
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.plan.estimate import estimate as run_estimate

    device = load_device(gpu, gpu_memory_gib)
    args = EngineArgs.from_flags(
        gpu=device,
        gpu_memory_utilization=gpu_memory_utilization,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        data_parallel_size=dp,
        enable_expert_parallel=enable_expert_parallel,
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        enforce_eager=enforce_eager,
        vllm_version=vllm_version,
    )
    _check_plan_flags(args, target_concurrency=target_concurrency, vllm_version=vllm_version)
    limits = mm_limits(limit_mm_per_prompt, language_model_only)
    spec = load_served_model(model, dtype, limits, strict=strict)
    args = _multimodal_args(args, limits, skip_mm_profiling, mm_processor_kwargs)
    est = run_estimate(spec, args, ctx_tokens=ctx, concurrency=concurrency, prefix_tokens=prefix_tokens)
    capacity = est.fit.capacity if est.fit else None
    fixes: tuple[Fix, ...] = ()
    rec = None
    if est.fit is not None and capacity is not None:
        from kvplan.plan.fixes import fixes_for, recommend

        args = replace(args, max_model_len=est.max_model_len)  # as planned: --ctx when not given
        # the concurrency asked about is the target when it does not fit: the answer says what would
        want = target_concurrency if target_concurrency is not None else (None if est.fit.fits else concurrency)
        rec = recommend(spec, args, want) if want is not None else None
        fixes = fixes_for(spec, args, capacity, want)
    tier = _cpu_tier(capacity, args, kv_offloading_size) if kv_offloading_size is not None else None
    _print_estimate(est, fixes, rec, as_json, tier)


def _cpu_tier(capacity: Any, args: Any, size_gib: float) -> dict[str, Any]:
    """The CPU tier `--kv-offloading-size` gives beside the GPU pool (needs a GPU plan)."""
    from kvplan.perf.cpu_tier_plan import cpu_tier_plan

    if capacity is None or args.gpu is None:
        raise KvplanError("--kv-offloading-size needs a GPU: add --gpu NAME")
    tier = cpu_tier_plan(capacity, args, size_gib, "native", True)
    return {**tier.figures(), "cpu_tier_tokens": tier.num_blocks * capacity.block_size_tokens,
            "gpu_kv_cache_tokens": capacity.num_gpu_blocks * capacity.block_size_tokens}


def _check_plan_flags(args, *, target_concurrency: int | None, vllm_version: str | None) -> None:
    """Flags that only mean something in a capacity plan, refused without a GPU (or KV bytes)."""
    if args.plans_capacity:
        return
    given = [f for f, v in (("--target-concurrency", target_concurrency), ("--max-num-seqs", args.max_num_seqs),
                            ("--max-num-batched-tokens", args.max_num_batched_tokens),
                            ("--quantization", args.quantization), ("--vllm-version", vllm_version)) if v is not None]
    if given or args.enforce_eager:
        raise KvplanError(f"{(given or ['--enforce-eager'])[0]} needs a GPU: add --gpu NAME or --gpu-memory-gib X")


def _multimodal_args(
    engine_args, limits: dict[str, int] | None, skip_mm_profiling: bool, mm_processor_kwargs: str | None
):
    """The multimodal flags on the engine arguments."""
    from kvplan.spec.encoder_params import parse_mm_processor_kwargs

    max_pixels, ignored = parse_mm_processor_kwargs(mm_processor_kwargs) if mm_processor_kwargs else (None, [])
    if ignored:
        typer.echo(
            f"kvplan: warning: --mm-processor-kwargs {', '.join(ignored)}: not modelled (only max_pixels is)", err=True
        )
    return replace(engine_args, limit_mm_per_prompt=tuple(sorted(limits.items())) if limits else None,
                   skip_mm_profiling=skip_mm_profiling, mm_max_pixels=max_pixels)


def _print_estimate(est, fixes, rec, as_json: bool, tier: dict[str, Any] | None = None) -> None:
    from kvplan.plan.estimate import to_json

    for warning in est.warnings:
        typer.echo(f"kvplan: warning: {warning}", err=True)
    if as_json:
        out = to_json(est, fixes, rec)
        if tier is not None:
            out["cpu_tier"] = tier
        typer.echo(json.dumps(out, indent=2))
        return
    from kvplan.report.capacity_view import render_fixes, render_recommendation
    from kvplan.report.estimate_view import render_estimate

    console = make_console()
    render_estimate(console, est)
    render_fixes(console, fixes)
    if rec is not None:
        render_recommendation(console, rec)
    if tier is not None:
        console.print(f"CPU tier ({tier['kv_offloading_size_gib']:g} GiB, vLLM's native offloading): "
                      f"{tier['cpu_tier_blocks']:,} blocks = {tier['cpu_tier_tokens']:,} tokens beside the GPU's "
                      f"{tier['gpu_kv_cache_tokens']:,}; a block loads in {tier['cpu_load_ms_per_block']:.3f} ms over "
                      f"{tier['host_link']}", highlight=False)
        if tier.get("kv_offloading_note"):
            console.print(f"[dim]{tier['kv_offloading_note']}[/dim]")


def _int_list(flag: str, text: str, largest: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise KvplanError(f"{flag} takes comma-separated integers, got {short_text(text)}") from None
    if not values or min(values) <= 0 or max(values) > largest:
        raise KvplanError(f"{flag} takes integers in 1..{largest:,}, got {short_text(text)}")
    return values


def short_text(text: str) -> str:
    """A flag's value in an error line, cut to a readable length."""
    from kvplan.validation import short_repr

    return short_repr(text)


@app.command("sweep")
def sweep_command(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Profile name or alias, a config.json, or a model directory.")
    ],
    ctx: Annotated[
        str, typer.Option(help="Comma-separated contexts (max_model_len).")
    ] = "1024,2048,4096,8192,16384,32768",
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrencies.")] = "1,8,32,128",
    kv_cache_dtype: Annotated[str, typer.Option(help="Comma-separated KV dtypes.")] = "auto,fp8",
    block_size: Annotated[str, typer.Option(help="Comma-separated block sizes.")] = "16",
    gpu: Annotated[str, typer.Option(help="Comma-separated catalog GPUs.")] = "h100",
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size")] = 1,
    pp: Annotated[int, typer.Option("--pp", "--pipeline-parallel-size")] = 1,
    dtype: Annotated[str, typer.Option()] = "auto",
    gpu_memory_utilization: Annotated[float, typer.Option()] = 0.9,
    vllm_version: Annotated[str | None, typer.Option()] = None,
    csv_path: Annotated[str | None, typer.Option("--csv", help="Write the table as CSV here.")] = None,
    plot_path: Annotated[
        str | None, typer.Option("--plot", help="Write a PNG of max concurrency vs context per KV dtype.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the table as one JSON list of rows instead.", metavar="")
    ] = False,
) -> None:
    """vLLM capacity over a grid of ctx x concurrency x KV dtype x block size x GPU (pandas table)."""
    from kvplan.files import check_output_path, write_files
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.plan.overheads import DEFAULT_VLLM_VERSION
    from kvplan.plan.sweep import plot_concurrency
    from kvplan.plan.sweep import sweep as run_sweep
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    outputs = [check_output_path(p) for p in (csv_path, plot_path) if p]
    spec = load_model(model)
    base = EngineArgs(gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      dtype=dtype, vllm_version=vllm_version or DEFAULT_VLLM_VERSION)
    df = run_sweep(spec, ctx_tokens=_int_list("--ctx", ctx, MAX_SWEEP_TOKENS),
                   concurrency=_int_list("--concurrency", concurrency, MAX_SWEEP_TOKENS),
                   kv_cache_dtypes=[k.strip() for k in kv_cache_dtype.split(",") if k.strip()],
                   block_sizes=_int_list("--block-size", block_size, MAX_SWEEP_BLOCK_SIZE),
                   gpus=[load_gpu(g.strip()) for g in gpu.split(",") if g.strip()], base=base)
    files: dict[str, str | bytes] = {}
    if csv_path:
        files[csv_path] = df.to_csv(index=False)
    if plot_path:  # rendered in memory first: an unknown image format leaves no CSV behind
        files[plot_path] = plot_concurrency(df, plot_path, title=f"{spec.name}: vLLM max concurrency")
    write_files(files)
    for path in outputs:
        typer.echo(f"kvplan: wrote {path}" + (f" ({len(df):,} rows)" if str(path) == csv_path else ""), err=True)
    if as_json:
        typer.echo(df.to_json(orient="records"))
        return
    import pandas as pd

    with pd.option_context("display.max_rows", 60, "display.width", 200):
        typer.echo(df.to_string(index=False, max_rows=60))


@app.command()
def gpus(as_json: Annotated[bool, typer.Option("--json", metavar="")] = False) -> None:
    """List the GPU catalog (memory as marketed and as CUDA sees it, bandwidth, throughput, list price)."""
    from kvplan.report.catalog_view import render_gpus
    from kvplan.spec.gpu import gpu_catalog
    from kvplan.spec.prices import list_prices

    catalog, prices = gpu_catalog(), list_prices()
    if as_json:
        from kvplan.report.catalog_view import public_source

        rows = [{**g.__dict__, "source": public_source(g.source, "kvplan/data/gpus.yaml"),
                 "cuda_total_source": public_source(g.cuda_total_source, "kvplan/data/gpus.yaml"),
                 "usd_per_gpu_hour": (p := prices.get(g.name)) and p.usd_per_hour,
                 "usd_per_hour_source": p and f"{p.basis} ({p.dataset})"} for g in catalog.values()]
        typer.echo(json.dumps(rows, indent=2, default=list))
        return
    render_gpus(make_console(), list(catalog.values()), prices)


@profiles_app.callback(invoke_without_command=True)
def profiles_list(ctx: typer.Context, as_json: AsJson = False) -> None:
    """List bundled model profiles (`kvplan profiles show NAME` prints one)."""
    if ctx.invoked_subcommand is not None:
        return
    from kvplan.plan.kv import KvLayout
    from kvplan.report.catalog_view import render_profiles
    from kvplan.spec.profiles import load_model, model_names

    specs = [load_model(n) for n in model_names()]
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "name": s.name,
                        "hf_id": s.hf_id,
                        "num_layers": s.num_layers,
                        "attention_layers": s.attention_kinds,
                        "num_kv_heads": s.num_kv_heads,
                        "head_dim": s.head_dim,
                        "kv_bytes_per_token": KvLayout.of(s).bytes_per_token(),
                        "params": s.params.total,
                    }
                    for s in specs
                ]
            )
        )
        return
    render_profiles(make_console(), specs)


@profiles_app.command("show")
def profiles_show(name: str, as_json: Annotated[bool, typer.Option("--json", metavar="")] = False) -> None:
    """Print one profile: its source, the parsed spec and the raw config."""
    from kvplan.report.catalog_view import render_profile
    from kvplan.spec.profiles import load_model, model_profile

    spec = load_model(name)
    if as_json:
        from kvplan.report.catalog_view import public_source
        from kvplan.spec.profiles import model_names

        if spec.name in model_names():  # a bundled profile: its file as stored
            profile = dict(model_profile(spec.name))
            profile["source"] = public_source(str(profile.get("source", "")), f"profiles/{spec.name}.yaml")
        else:  # a repo id from the HF cache, a directory or a config.json: what was read
            profile = {"name": spec.name, "hf_id": spec.hf_id, "source": spec.source, "config": spec.config}
        typer.echo(json.dumps(profile, indent=2))
        return
    render_profile(make_console(), spec)


