"""The served model and its GPU from the flags `estimate`, `predict` and `plan` share: one reading
of `--model`, `--dtype`, `--gpu` / `--gpu-memory-gib` and the multimodal limits for every command.
Pure Python: no torch.
"""
from __future__ import annotations

from dataclasses import replace

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
