"""The Qwen-VL vision towers (vLLM qwen2_vl.py, qwen2_5_vl.py, qwen3_vl.py; h: vision hidden, I: its MLP,
L: blocks, p: patch, C: channels, t: temporal patch, m: spatial merge, H: text hidden):

    qwen2_vl    patch conv3d C t p^2 h (h: embed_dim), L LayerNorm ViT blocks (I = mlp_ratio h); merger
                LayerNorm 2h + (h m^2)^2 + h m^2 + h m^2 x H + H (H: vision_config.hidden_size)
    qwen2_5_vl  patch conv3d C t p^2 h, L x (3h^2 + 3h + h^2 + h attention, 3 (h I) + 2I + h gated MLP,
                2 RMSNorms 2h); merger RMSNorm h + (h m^2)^2 + h m^2 + h m^2 x H + H (Qwen2.5-Omni's too)
    qwen3_vl    patch conv3d C t p^2 h + h, positions n h, L x (4 (h^2 + h) + 2 h I + I + h + 4h); merger and
                each deepstack merger: LayerNorm + (h m^2)^2 + h m^2 + h m^2 x H + H (Qwen3.5 and
                Qwen3-Omni's thinker reuse it)

Profile run: Qwen2.5-VL's image processor keeps max_pixels 12,845,056 (3,584 px: 65,536 patches, T 16,384
with 2 x 2 merge); a video is profiled once max_model_len >= 32,768: ceil(frames / 2) x 16,384 tokens, at
most 14 frames. Qwen3-VL's longest_edge 16,777,216 (4,096 px, patch 16: 65,536 patches, T 16,384); its
cached output carries the deepstack features too. `--mm-processor-kwargs max_pixels` bounds an image:
smart_resize keeps floor(sqrt(max_pixels) / (p m)) merged cells a side.
"""
from __future__ import annotations

import math
from typing import Any

from kvplan.spec.families.tower import Tower
from kvplan.spec.vit import VitDims, pos_int, siglip_blocks

QWEN25_MAX_PIXELS = 12845056  # Qwen2-VL / Qwen2.5-VL image processor default (3584^2)
QWEN3_LONGEST_EDGE = 16777216  # Qwen3-VL image processor default (4096^2)
QWEN_MAX_VIDEO_FRAMES = 14


def _merger(hm: int, out: int) -> int:
    return hm * hm + hm + hm * out + out


def qwen2_vl_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h = pos_int(v, "embed_dim")  # hidden_size is the text model's width here
    out = pos_int(v, "hidden_size", default=text_hidden)
    blocks = siglip_blocks(h, h * pos_int(v, "mlp_ratio", default=4), pos_int(v, "depth"))
    return d.channels * d.temporal * d.patch ** 2 * h + blocks + 2 * h + _merger(h * d.merge ** 2, out)


def qwen2_5_vl_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h, inter = d.hidden, d.intermediate
    block = 4 * h * h + 4 * h + 3 * h * inter + 2 * inter + h + 2 * h
    return d.channels * d.temporal * d.patch ** 2 * h + d.layers * block + h + _merger(h * d.merge ** 2, d.out)


def qwen3_vl_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h, inter = d.hidden, d.intermediate
    block = 4 * (h * h + h) + 2 * h * inter + inter + h + 4 * h
    hm = h * d.merge ** 2
    merger = _merger(hm, d.out)
    deepstack = len(v.get("deepstack_visual_indexes") or [])
    tower = d.channels * d.temporal * d.patch**2 * h + h + pos_int(v, "num_position_embeddings") * h + d.layers * block
    return tower + (2 * h + merger) + deepstack * (2 * hm + merger)


def _image(v: dict[str, Any], pixels: int) -> tuple[int, int]:
    p, m = pos_int(v, "patch_size", default=14), pos_int(v, "spatial_merge_size", default=2)
    side = max(1, math.isqrt(pixels) // (p * m)) * m  # patches per side, a multiple of the merge
    return side * side // (m * m), side * side


def qwen2_5_vl_profile(outer: dict[str, Any], v: dict[str, Any], limits: dict[str, int], max_model_len: int,
                       max_pixels: int | None) -> dict[str, tuple[int, int]]:
    out = {"image": _image(v, max_pixels or QWEN25_MAX_PIXELS)}
    slices = min(math.ceil(QWEN_MAX_VIDEO_FRAMES / 2), max_model_len // 16384)  # 2 frames per temporal patch
    if slices > 0 and slices * 16384 > out["image"][0]:
        out["video"] = (slices * 16384, slices * 65536)
    return out


def qwen3_vl_profile(outer: dict[str, Any], v: dict[str, Any], limits: dict[str, int], max_model_len: int,
                     max_pixels: int | None) -> dict[str, tuple[int, int]]:
    return {"image": _image(v, max_pixels or QWEN3_LONGEST_EDGE)}


TOWERS = (
    Tower(
        "qwen2_5_vl",
        vision_types=("qwen2_5_vl*", "qwen2_5_omni_vision*"),
        carriers=("qwen2_5_vl*",),
        params=qwen2_5_vl_params,
        profile=qwen2_5_vl_profile,
        temporal=True,
        gated_mlp=True,
        own_out_width=True,
    ),
    Tower("qwen2_vl", vision_types=("qwen2_vl*",), carriers=("qwen2_vl",), params=qwen2_vl_params),
    Tower(
        "qwen3_vl",
        vision_types=("qwen3_vl*", "qwen3_5*", "qwen3_omni_moe_vision*"),
        carriers=("qwen3_vl*", "qwen3_5*"),
        params=qwen3_vl_params,
        profile=qwen3_vl_profile,
        temporal=True,
        own_out_width=True,
        deepstack=True,
    ),
)
