"""The served model and its GPU from the flags `estimate`, `predict` and `plan` share: one reading
of `--model`, `--dtype`, `--gpu` / `--gpu-memory-gib` and the multimodal limits for every command.
Pure Python: no torch.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer

from kvplan.errors import KvplanError
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec


def load_device(gpu: str | None, gpu_memory_gib: float | None = None) -> GpuSpec | None:
    """A catalog GPU, a bare size, or none (checked before any model is read: it is quick)."""
    from kvplan.spec.gpu import custom_gpu, load_gpu

    if gpu is not None and not gpu.strip():
        raise KvplanError("--gpu is empty: name a GPU of the catalog (`kvplan gpus` lists them)")
    if gpu and gpu_memory_gib is not None:
        raise KvplanError("give either --gpu or --gpu-memory-gib, not both")
    return load_gpu(gpu) if gpu else (custom_gpu(gpu_memory_gib) if gpu_memory_gib is not None else None)


def load_served_model(
    model: str, dtype: str, limits: dict[str, int] | None = None, *, strict: bool = False
) -> ModelSpec:
    """The model spec as vLLM serves it: in `dtype`, without its vision tower when
    --limit-mm-per-prompt allows no images or videos. What the spec could not model is refused
    with --strict; the caller prints it as warnings otherwise."""
    from kvplan.spec.dtypes import normalize_model_dtype
    from kvplan.spec.encoder_params import vision_tower_loaded
    from kvplan.spec.profiles import load_model

    spec = load_model(model)
    if strict and spec.warnings:
        raise KvplanError(f"--strict: {spec.warnings[0]}")
    if dtype != "auto":
        spec = replace(spec, dtype=normalize_model_dtype(dtype))
    if limits is not None and not vision_tower_loaded(limits):
        spec = spec.without_encoder()
    return spec


def mm_limits(limit_mm_per_prompt: str | None, language_model_only: bool) -> dict[str, int] | None:
    """--limit-mm-per-prompt, parsed once; --language-model-only is images and videos at 0."""
    from kvplan.spec.encoder_params import parse_mm_limits

    limits = parse_mm_limits(limit_mm_per_prompt) if limit_mm_per_prompt is not None else None
    return {**(limits or {}), "image": 0, "video": 0} if language_model_only else limits


def served(model: str, gpu: str, *, dtype: str, strict: bool, **flags):
    """The served model and its engine arguments, read and checked as `estimate` reads them; what
    the model's spec could not model is a warning (refused with --strict)."""
    from kvplan.plan.engine_args import EngineArgs

    args = EngineArgs.from_flags(gpu=load_device(gpu), dtype=dtype, **flags)
    spec = load_served_model(model, dtype, strict=strict)
    for warning in spec.warnings:
        typer.echo(f"kvplan: warning: {warning}", err=True)
    return spec, args


def plan_candidates(gpus: str, quantizations: str) -> tuple[list, list[str | None]]:
    """`plan`'s GPUs and runtime quantizations, each checked (one line naming a bad one)."""
    from kvplan.spec.gpu import load_gpu

    devices = [load_gpu(g.strip()) for g in gpus.split(",") if g.strip()]
    if not devices:
        raise KvplanError(f"--gpu names no GPU, got {gpus!r}")
    quants = [None if q.strip() in ("none", "") else q.strip() for q in quantizations.split(",")]
    for q in quants:
        if q not in (None, "fp8"):
            raise KvplanError(f"--quantization: {q!r} is not a runtime quantization kvplan plans; choices: none, fp8")
    return devices, quants


def gpu_prices(texts: list[str], candidates: list[str]) -> dict[str, Any]:
    """Each candidate GPU's price per GPU-hour: --price GPU=USD, else the catalog's list price."""
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.prices import prices_for, user_price

    given = {}
    for text in texts:
        name, eq, value = text.partition("=")
        if not eq or not name.strip():
            raise KvplanError(f"--price takes GPU=USD_PER_HOUR (e.g. h100=2.5), got {text!r}")
        gpu = load_gpu(name.strip()).name
        if gpu not in candidates:
            raise KvplanError(f"--price {text}: {gpu} is not a GPU this plan considers ({', '.join(candidates)}); "
                              "add it to --gpu or drop the price")
        given[gpu] = user_price(gpu, value.strip())
    return prices_for(candidates, given)
