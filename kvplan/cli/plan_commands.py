"""Plan commands: `kvplan estimate`, `sweep`, `gpus`, `profiles`. Pure Python: no torch."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Optional

import typer

from kvplan.cli.app import app, make_console, profiles_app
from kvplan.errors import KvplanError

MAX_SWEEP_TOKENS = 2**31  # contexts and concurrencies: vLLM's own int32 limits
MAX_SWEEP_BLOCK_SIZE = 2**16


@app.command()
def estimate(
    model: Annotated[str, typer.Option("--model", "-m", help="Profile name or alias, a config.json, or a model directory.")],
    ctx: Annotated[Optional[int], typer.Option(help="Tokens per request (prompt + output); default: --max-model-len, else 4096.")] = None,
    concurrency: Annotated[int, typer.Option(help="Concurrent requests.")] = 1,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto, float16, bfloat16, float32, fp8, fp8_e4m3, fp8_e5m2; int8, int4 (planned only: no vLLM flag).")] = "auto",
    block_size: Annotated[int, typer.Option(help="Tokens per KV block (vLLM default 16).")] = 16,
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size", help="Tensor-parallel size.")] = 1,
    pp: Annotated[int, typer.Option("--pp", "--pipeline-parallel-size", help="Pipeline-parallel size.")] = 1,
    dtype: Annotated[str, typer.Option(help="Model dtype: auto (the checkpoint's), float16, bfloat16, float32.")] = "auto",
    prefix_tokens: Annotated[int, typer.Option(help="Tokens of a prefix shared by all requests.")] = 0,
    max_model_len: Annotated[Optional[int], typer.Option(help="vLLM --max-model-len (default: --ctx; vLLM's own default is the model's maximum).")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU from the catalog (see `kvplan gpus`).")] = None,
    gpu_memory_gib: Annotated[Optional[float], typer.Option(help="Total GPU memory as CUDA reports it, in GiB.")] = None,
    gpu_memory_utilization: Annotated[Optional[float], typer.Option(help="Fraction of GPU memory the engine may use (vLLM default 0.9).")] = None,
    quantization: Annotated[Optional[str], typer.Option(help="Runtime weight quantization of an unquantized checkpoint (e.g. fp8).")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(help="vLLM --max-num-seqs (default chosen by GPU memory, as vLLM).")] = None,
    max_num_batched_tokens: Annotated[Optional[int], typer.Option(help="vLLM --max-num-batched-tokens (default by GPU memory).")] = None,
    kv_cache_memory_bytes: Annotated[Optional[int], typer.Option(help="KV cache bytes per GPU; bypasses --gpu-memory-utilization, as in vLLM.")] = None,
    enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs (vLLM --enforce-eager).")] = False,
    vllm_version: Annotated[Optional[str], typer.Option(help="vLLM version whose behaviour to model (default: the newest modelled).")] = None,
    target_concurrency: Annotated[Optional[int], typer.Option(help="Print the `vllm serve` line that serves N requests of max_model_len.")] = None,
    limit_mm_per_prompt: Annotated[Optional[str], typer.Option(help="vLLM --limit-mm-per-prompt ('{\"image\": 0}' or image=0,video=0): 0 images and videos load no vision tower.")] = None,
    skip_mm_profiling: Annotated[bool, typer.Option("--skip-mm-profiling", help="vLLM --skip-mm-profiling: the vision tower is loaded but its dummy batch is not profiled.")] = False,
    language_model_only: Annotated[bool, typer.Option("--language-model-only", help="vLLM --language-model-only: no vision tower (as image=0,video=0).")] = False,
    mm_processor_kwargs: Annotated[Optional[str], typer.Option(help="vLLM --mm-processor-kwargs JSON; max_pixels bounds a Qwen-VL image in the profile run.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """KV-cache bytes per token, request and batch; with a GPU, vLLM's capacity plan and whether it fits."""
    from kvplan.plan.estimate import estimate as run_estimate

    _check_estimate_flags(gpu, gpu_memory_gib, max_model_len, ctx=ctx, concurrency=concurrency, block_size=block_size,
                          tp=tp, pp=pp)
    limits = _mm_limits(limit_mm_per_prompt, language_model_only)
    spec, device = _estimate_model_and_gpu(model, dtype, gpu, gpu_memory_gib, limits)
    engine_args = _engine_args(device, gpu_memory_utilization, tp, pp, dtype, quantization, kv_cache_dtype, block_size,
                               max_model_len, max_num_seqs, max_num_batched_tokens, kv_cache_memory_bytes,
                               enforce_eager, vllm_version, target_concurrency)
    engine_args = _multimodal_args(engine_args, limits, skip_mm_profiling, mm_processor_kwargs)
    est = run_estimate(spec, ctx_tokens=ctx, concurrency=concurrency, kv_cache_dtype=kv_cache_dtype,
                       block_size=block_size, tp=tp, pp=pp, prefix_tokens=prefix_tokens,
                       max_model_len=max_model_len, gpu=device,
                       gpu_memory_utilization=0.9 if gpu_memory_utilization is None else gpu_memory_utilization,
                       engine_args=engine_args)
    capacity = est.fit.capacity if est.fit else None
    fixes, rec = (), None
    if capacity is not None and engine_args is not None:
        from kvplan.plan.fixes import fixes_for, recommend

        engine_args = replace(engine_args, max_model_len=est.max_model_len)  # as planned: --ctx when not given
        fixes = fixes_for(spec, engine_args, capacity, target_concurrency)
        rec = recommend(spec, engine_args, target_concurrency) if target_concurrency else None
    _print_estimate(est, fixes, rec, as_json)


def _mm_limits(limit_mm_per_prompt: str | None, language_model_only: bool) -> dict[str, int] | None:
    """--limit-mm-per-prompt, parsed once; --language-model-only is images and videos at 0."""
    from kvplan.spec.encoder_params import parse_mm_limits

    limits = parse_mm_limits(limit_mm_per_prompt) if limit_mm_per_prompt is not None else None
    return {**(limits or {}), "image": 0, "video": 0} if language_model_only else limits


def _multimodal_args(engine_args, limits: dict[str, int] | None, skip_mm_profiling: bool, mm_processor_kwargs: str | None):
    """The multimodal flags on the engine arguments (None without a GPU)."""
    from kvplan.spec.encoder_params import parse_mm_processor_kwargs

    max_pixels, ignored = parse_mm_processor_kwargs(mm_processor_kwargs) if mm_processor_kwargs else (None, [])
    if ignored:
        typer.echo(f"kvplan: warning: --mm-processor-kwargs {', '.join(ignored)}: not modelled (only max_pixels is)", err=True)
    if engine_args is None:
        return None
    return replace(engine_args, limit_mm_per_prompt=tuple(sorted(limits.items())) if limits else None,
                   skip_mm_profiling=skip_mm_profiling, mm_max_pixels=max_pixels)


def _print_estimate(est, fixes, rec, as_json: bool) -> None:
    from kvplan.plan.estimate import to_json

    for warning in est.warnings:
        typer.echo(f"kvplan: warning: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps(to_json(est, fixes, rec), indent=2))
        return
    from kvplan.report.capacity_view import render_fixes, render_recommendation
    from kvplan.report.estimate_view import render_estimate

    console = make_console()
    render_estimate(console, est)
    render_fixes(console, fixes)
    if rec is not None:
        render_recommendation(console, rec)


def _check_estimate_flags(gpu: str | None, gpu_memory_gib: float | None, max_model_len: int | None,
                          **sizes: int | None) -> None:
    """Contradictory or non-positive flags of `estimate`, rejected before any profile is read."""
    if gpu and gpu_memory_gib is not None:
        raise KvplanError("give either --gpu or --gpu-memory-gib, not both")
    for name, value in sizes.items():
        if value is not None and value <= 0:
            raise KvplanError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if max_model_len is not None and max_model_len <= 0:
        raise KvplanError(f"--max-model-len must be positive, got {max_model_len}")


def _estimate_model_and_gpu(model: str, dtype: str, gpu: str | None, gpu_memory_gib: float | None,
                            limits: dict[str, int] | None = None):
    """The model spec (served in `dtype`; without its vision tower when --limit-mm-per-prompt allows no
    images or videos, as vLLM loads it) and the GPU: a catalog name, a bare size, or none."""
    from dataclasses import replace

    from kvplan.spec.dtypes import normalize_model_dtype
    from kvplan.spec.encoder_params import vision_tower_loaded
    from kvplan.spec.gpu import custom_gpu, load_gpu
    from kvplan.spec.profiles import load_model

    spec = load_model(model)
    if dtype != "auto":
        spec = replace(spec, dtype=normalize_model_dtype(dtype))
    if limits is not None and not vision_tower_loaded(limits):
        spec = spec.without_encoder()
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
    if device is None and kv_cache_memory_bytes is None:
        # --kv-cache-memory-bytes alone is a plan: vLLM then ignores the GPU's size and utilization
        given = [f for f, v in (("--target-concurrency", target_concurrency),
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

    from kvplan.files import check_output_path, write_files

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
        from kvplan.report.catalog_view import public_source

        rows = [{**g.__dict__, "source": public_source(g.source, "kvplan/data/gpus.yaml"),
                 "cuda_total_source": public_source(g.cuda_total_source, "kvplan/data/gpus.yaml")} for g in catalog.values()]
        typer.echo(json.dumps(rows, indent=2, default=list))
        return
    render_gpus(make_console(), list(catalog.values()))


@profiles_app.callback()
def profiles_list(ctx: typer.Context) -> None:
    """List bundled model profiles (`kvplan profiles show NAME` prints one)."""
    if ctx.invoked_subcommand is not None:
        return
    from kvplan.report.catalog_view import render_profiles
    from kvplan.spec.profiles import load_model, model_names

    render_profiles(make_console(), [load_model(n) for n in model_names()])


@profiles_app.command("show")
def profiles_show(name: str, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print one profile: its source, the parsed spec and the raw config."""
    from kvplan.report.catalog_view import render_profile
    from kvplan.spec.profiles import load_model, model_profile

    spec = load_model(name)
    if as_json:
        from kvplan.report.catalog_view import public_source
        from kvplan.spec.profiles import model_names

        if spec.name in model_names():  # a bundled profile: its file as stored
            profile = dict(model_profile(spec.name))
            profile["source"] = public_source(str(profile.get("source", "")), f"kvplan/data/models/{spec.name}.yaml")
        else:  # a repo id from the HF cache, a directory or a config.json: what was read
            profile = {"name": spec.name, "hf_id": spec.hf_id, "source": spec.source, "config": spec.config}
        typer.echo(json.dumps(profile, indent=2))
        return
    render_profile(make_console(), spec)


