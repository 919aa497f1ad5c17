"""`EncoderProfile`: the multimodal part of vLLM V1's profile run, which the KV budget pays for.

Before the decoder's dummy forward, `GPUModelRunner.profile_run` (vllm/v1/worker/gpu_model_runner.py)
runs the vision encoder on a dummy batch and keeps its outputs in the encoder cache during the
decoder run, so the activation peak is max(encoder forward, encoder outputs + decoder forward).
The batch, from `compute_mm_encoder_budget` (vllm/v1/core/encoder_cache_manager.py) and
`MultiModalBudget` (vllm/v1/worker/utils.py; later vllm/multimodal/budget.py):
    T      LM tokens of one item of the maximum feature size (the modality with the largest T)
    B      encoder budget = max(max_num_batched_tokens, T)
    items  max(1, min(B // T, max_num_seqs * max(1, min(limit, max_model_len // T)))), limit 999 by default
The encoder sees items x patches ViT patches at once. Per family (model files in
vllm/model_executor/models/, image processors' defaults):
    siglip (gemma3_mm.py)     image_size/p squared patches (896/14: 4,096, one crop: pan-and-scan is off by
                              default), T = mm_tokens_per_image + 4 ("\\n\\n<start_of_image>", "<end_of_image>\\n\\n")
    pixtral (pixtral.py)      (image_size/p)^2 patches (1540/14: 12,100); grid image_size/(p m) = 55, T = 55 x 56
                              (an [IMG_BREAK]/[IMG_END] per row)
    qwen2_5_vl                max_pixels 12,845,056 -> 3584 px -> 65,536 patches, T 16,384 (merge 2x2); video, profiled
                              once max_model_len >= 32,768: ceil(frames / 2) x 16,384 tokens, at most 14 frames
    qwen3_vl (and Qwen3.5)    longest_edge 16,777,216 -> 4096 px, patch 16 -> 65,536 patches, T 16,384 (videos are
                              capped below that); the cached output carries the deepstack features too
    moonvit (kimi_vl.py)      1024 px dummy, in_token_limit 4,096 -> 924 px -> 4,356 patches, T 1,089 (merge 2x2)
Peak of the encoder forward, per GPU, per patch (the widest point of one block; bf16 activations,
flash/SDPA attention, so no patches^2 matrix): pixels (C t p^2) + max(attention: residual + norm +
qkv + output = 2h + 4h/tp, MLP: residual + norm + output + up (x2 gated) + act = 3h + g I/tp), where
TP splits the qkv and MLP widths except in MoonViT (replicated). Other towers (Llama-4, GLM-4.xV,
LLaVA-style, Mllama) are not modelled: the plan says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvplan.spec.encoder_params import encoder_family

DEFAULT_MM_LIMIT = 999  # vllm/config/multimodal.py: an unspecified modality
MODELLED = ("siglip", "pixtral", "qwen2_5_vl", "qwen3_vl", "moonvit")
_QWEN25_MAX_PIXELS = 12845056  # Qwen2-VL / Qwen2.5-VL image processor default (3584^2)
_QWEN3_LONGEST_EDGE = 16777216  # Qwen3-VL image processor default (4096^2)
_KIMI_IN_TOKEN_LIMIT = 4096  # Kimi-VL image processor; dummy image 1024 x 1024
_QWEN_MAX_VIDEO_FRAMES = 14


@dataclass(frozen=True)
class EncoderProfile:
    """The dummy multimodal batch of one profile run and what it costs on one GPU."""

    family: str
    modality: str
    tokens_per_item: int  # T
    patches_per_item: int
    items: int
    forward_peak_bytes: int  # ViT activations at their widest, pixels included
    cache_bytes: int  # encoder outputs held while the decoder's dummy forward runs

    def activation_bytes(self, decoder_bytes: int, fixed_bytes: int) -> int:
        """The profile run's peak: the encoder's forward, or its outputs beside the decoder's."""
        return max(decoder_bytes + self.cache_bytes, fixed_bytes + self.forward_peak_bytes)


def _i(cfg: dict[str, Any], key: str, default: int) -> int:
    value = cfg.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else default


def _items(tokens: dict[str, tuple[int, int]], limits: dict[str, int], *, mnbt: int, max_num_seqs: int,
           max_model_len: int) -> tuple[str, int]:
    """(profiled modality, items per batch) as MultiModalBudget picks them."""
    modality = max(tokens, key=lambda m: tokens[m][0])
    t = tokens[modality][0]
    budget = max(mnbt, t)
    per_prompt = max(1, min(limits.get(modality, DEFAULT_MM_LIMIT), max_model_len // t))
    return modality, max(1, min(budget // t, max_num_seqs * per_prompt))


def _qwen25_video(max_model_len: int) -> tuple[int, int] | None:
    """(T, patches) of the longest video a Qwen2.5-VL prompt holds: 2 frames per temporal patch."""
    slices = min(math.ceil(_QWEN_MAX_VIDEO_FRAMES / 2), max_model_len // 16384)
    return (slices * 16384, slices * 65536) if slices > 0 else None


def _items_by_modality(family: str, outer: dict[str, Any], v: dict[str, Any], limits: dict[str, int],
                       max_model_len: int, max_pixels: int | None = None) -> dict[str, tuple[int, int]]:
    """{modality: (T, patches per item)} for the modalities the limits allow."""
    p = _i(v, "patch_size", 14)
    out: dict[str, tuple[int, int]] = {}
    if family == "siglip":
        side = _i(v, "image_size", 896) // p
        out["image"] = (_i(outer, "mm_tokens_per_image", 256) + 4, side * side)
    elif family == "pixtral":
        grid = _i(v, "image_size", 1540) // (p * _i(outer, "spatial_merge_size", 2))
        side = _i(v, "image_size", 1540) // p
        out["image"] = (grid * (grid + 1), side * side)
    elif family in ("qwen2_5_vl", "qwen3_vl"):
        m = _i(v, "spatial_merge_size", 2)
        pixels = max_pixels or (_QWEN25_MAX_PIXELS if family == "qwen2_5_vl" else _QWEN3_LONGEST_EDGE)
        side = max(1, math.isqrt(pixels) // (p * m)) * m  # patches per side, a multiple of the merge
        out["image"] = (side * side // (m * m), side * side)
        video = _qwen25_video(max_model_len) if family == "qwen2_5_vl" else None
        if video and video[0] > out["image"][0]:
            out["video"] = video
    elif family == "moonvit":
        pixels, cells = 1024, (1024 // p) ** 2
        if cells > _KIMI_IN_TOKEN_LIMIT:  # scaled down to the token limit, then padded to the 2x2 merge kernel
            pixels = int(1024 * math.sqrt(_KIMI_IN_TOKEN_LIMIT / cells))
        side = -(-pixels // (2 * p)) * 2
        out["image"] = (side * side // 4, side * side)
    return {m: t for m, t in out.items() if limits.get(m, DEFAULT_MM_LIMIT) > 0}


def encoder_profile(config: dict[str, Any], *, text_hidden: int, dtype_bytes: int, tp: int, max_num_batched_tokens: int,
                    max_num_seqs: int, max_model_len: int, limits: dict[str, int] | None = None,
                    max_pixels: int | None = None) -> EncoderProfile | None:
    """The encoder part of the profile run for a modelled vision tower (None: no tower, a tower
    not modelled, or every vision modality limited to 0). `max_pixels`: --mm-processor-kwargs'
    bound on a Qwen-VL image (smart_resize keeps floor(sqrt(max_pixels) / (p m)) merged cells a side)."""
    family = encoder_family(config)
    if family not in MODELLED:
        return None
    v = config["vision_config"]
    tokens = _items_by_modality(family, config, v, limits or {}, max_model_len, max_pixels)
    if not tokens:
        return None
    modality, items = _items(tokens, limits or {}, mnbt=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                             max_model_len=max_model_len)
    t, patches = tokens[modality]
    h = _i(v, "hidden_size", 0) or _i(v, "embed_dim", 1152)
    inter = _i(v, "intermediate_size", 4 * h)
    p, c = _i(v, "patch_size", 14), _i(v, "num_channels", 0) or _i(v, "in_channels", 0) or _i(v, "in_chans", 3)
    temporal = _i(v, "temporal_patch_size", 2) if family in ("qwen2_5_vl", "qwen3_vl") else 1
    split = 1 if family == "moonvit" else tp
    gated = 3 if family in ("pixtral", "qwen2_5_vl") else 2
    per_patch = c * temporal * p * p + max(2 * h + 4 * h // split, 3 * h + gated * inter // split)
    out_width = _i(v, "out_hidden_size", text_hidden) if family in ("qwen2_5_vl", "qwen3_vl") else text_hidden
    deepstack = len(v.get("deepstack_visual_indexes") or []) if family == "qwen3_vl" else 0
    return EncoderProfile(family, modality, t, patches, items, items * patches * per_patch * dtype_bytes,
                          items * t * out_width * (1 + deepstack) * dtype_bytes)
