"""MoonViT (Kimi-VL's tower; vLLM kimi_vl.py / moonvit.py): SigLIP-style blocks, a patch conv + h, 64 x 64
learned positions; projector LayerNorm 2h + (h k)^2 + h k + h k x H + H (k: the merge kernel's area).

Profile run: a 1,024 px dummy image, scaled down to the processor's in_token_limit of 4,096 patches
(924 px: 4,356 patches), padded to the 2 x 2 merge kernel, T = patches / 4 (1,089). The tower is not
split by tensor parallelism."""
from __future__ import annotations

import math
from typing import Any

from kvplan.spec.families.tower import Tower
from kvplan.spec.vit import VitDims, pos_int, siglip_blocks

KIMI_IN_TOKEN_LIMIT = 4096  # Kimi-VL image processor; dummy image 1024 x 1024


def moonvit_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h = d.hidden
    k = 1
    for side in v.get("merge_kernel_size") or [2, 2]:
        k *= int(side)
    tower = d.channels * d.patch ** 2 * h + h + 64 * 64 * h + siglip_blocks(h, d.intermediate, d.layers) + 2 * h
    hk = h * k
    return tower + 2 * h + hk * hk + hk + hk * text_hidden + text_hidden


def moonvit_profile(outer: dict[str, Any], v: dict[str, Any], limits: dict[str, int], max_model_len: int,
                    max_pixels: int | None) -> dict[str, tuple[int, int]]:
    p = pos_int(v, "patch_size", default=14)
    pixels, cells = 1024, (1024 // p) ** 2
    if cells > KIMI_IN_TOKEN_LIMIT:  # scaled down to the token limit, then padded to the 2x2 merge kernel
        pixels = int(1024 * math.sqrt(KIMI_IN_TOKEN_LIMIT / cells))
    side = -(-pixels // (2 * p)) * 2
    return {"image": (side * side // 4, side * side)}


TOWER = Tower("moonvit", vision_types=("moonvit",), params=moonvit_params, profile=moonvit_profile, replicated=True)
