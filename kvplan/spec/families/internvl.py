"""InternViT (InternVL 2.5 / 3, HF and original layouts; vLLM internvl.py): cls + positions + patch conv,
blocks with two layer-scale vectors, q/k/v (+ biases, + q/k norms), output projection, MLP and two norms;
projector: a LayerNorm over the pixel-shuffled width s h (s = (1 / downsample_ratio)^2), then s h x H and
H x H. Its profile run is not modelled (the plan says so)."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.tower import Tower
from kvplan.spec.vit import VitDims


def _side(value: Any, default: int) -> int:
    """image_size / patch_size as one number or a [height, width] pair (square assumed)."""
    if isinstance(value, list) and value:
        value = value[0]
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else default


def internvl_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h, inter = d.hidden, d.intermediate
    p = _side(v.get("patch_size"), d.patch)
    positions = (_side(v.get("image_size"), 448) // p) ** 2 + 1
    norm = h if v.get("norm_type") == "rms_norm" else 2 * h
    qkv_bias = 3 * h if v.get("attention_bias") or v.get("qkv_bias") else 0
    qk_norm = 2 * h if v.get("use_qk_norm") or v.get("qk_normalization") else 0  # RMSNorms, weight only
    block = 2 * h + 3 * h * h + qkv_bias + qk_norm + h * h + h + 2 * h * inter + inter + h + 2 * norm
    shuffle = round(1 / float(outer.get("downsample_ratio") or 0.5)) ** 2
    projector = 2 * shuffle * h + shuffle * h * text_hidden + text_hidden + text_hidden * text_hidden + text_hidden
    return h + positions * h + d.channels * p * p * h + h + d.layers * block + projector


TOWER = Tower("internvl", vision_types=("internvl_vision", "intern_vit_6b"), params=internvl_params)
