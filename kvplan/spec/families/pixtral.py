"""Pixtral (Mistral-3's tower; vLLM pixtral.py / mistral3.py): patch conv C p^2 h, ln_pre h, L blocks of
4 h^2 + 3 h I + 2h (no biases, gated MLP); projector: RMSNorm h, patch merger (h m^2) x h, linear h x H,
linear H x H (biases with `multimodal_projector_bias`).

Profile run: (image_size / p)^2 patches (1540 / 14: 12,100); a grid of image_size / (p m) = 55 merged cells
a side, T = 55 x 56 (an [IMG_BREAK] / [IMG_END] per row)."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.tower import Tower
from kvplan.spec.vit import VitDims, pos_int


def pixtral_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h, p = d.hidden, d.patch
    merge = pos_int(outer, "spatial_merge_size", default=2)
    bias = text_hidden if outer.get("multimodal_projector_bias") else 0
    tower = d.channels * p * p * h + h + d.layers * (4 * h * h + 3 * h * d.intermediate + 2 * h)
    return tower + h + h * merge * merge * h + h * text_hidden + bias + text_hidden * text_hidden + bias


def pixtral_profile(outer: dict[str, Any], v: dict[str, Any], limits: dict[str, int], max_model_len: int,
                    max_pixels: int | None) -> dict[str, tuple[int, int]]:
    p, size = pos_int(v, "patch_size", default=14), pos_int(v, "image_size", default=1540)
    grid = size // (p * pos_int(outer, "spatial_merge_size", default=2))
    side = size // p
    return {"image": (grid * (grid + 1), side * side)}


TOWER = Tower("pixtral", vision_types=("pixtral",), carriers=("mistral3", "pixtral"), params=pixtral_params,
              profile=pixtral_profile, gated_mlp=True)
