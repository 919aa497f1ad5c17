"""SigLIP (Gemma-3's tower; vLLM siglip.py / gemma3_mm.py): patch conv C p^2 h + h, positions (image / p)^2 h,
L pre-norm blocks with biases, a post LayerNorm, the attention-pooling head unless `vision_use_head` is
false (Gemma-3 checkpoints turn it off); Gemma-3's projector h x H + an RMSNorm h.

Profile run (gemma3_mm.py): one crop of image_size / p squared patches (896 / 14: 4,096; pan-and-scan is off
by default), T = mm_tokens_per_image + 4 ("\\n\\n<start_of_image>", "<end_of_image>\\n\\n")."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.tower import Tower
from kvplan.spec.vit import VitDims, pos_int, siglip_blocks


def siglip_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h, p = d.hidden, d.patch
    positions = (pos_int(v, "image_size", default=224) // p) ** 2
    tower = d.channels * p * p * h + h + positions * h + siglip_blocks(h, d.intermediate, d.layers) + 2 * h
    if v.get("vision_use_head", True):  # SigLIP's pooling head
        tower += h + 4 * (h * h + h) + 2 * h + 2 * h * d.intermediate + d.intermediate + h
    return tower + h * text_hidden + h  # Gemma-3 mm_input_projection + mm_soft_emb_norm


def siglip_profile(outer: dict[str, Any], v: dict[str, Any], limits: dict[str, int], max_model_len: int,
                   max_pixels: int | None) -> dict[str, tuple[int, int]]:
    side = pos_int(v, "image_size", default=896) // pos_int(v, "patch_size", default=14)
    return {"image": (pos_int(outer, "mm_tokens_per_image", default=256) + 4, side * side)}


TOWER = Tower("siglip", vision_types=("siglip*",), carriers=("gemma3",), params=siglip_params, profile=siglip_profile)
