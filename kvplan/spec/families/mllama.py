"""Llama-3.2-Vision's tower (`mllama`; vLLM mllama.py): a class token, patch conv, gated position and tile
embeddings (one row per supported aspect ratio + 1, over max_num_tiles tiles), two LayerNorms, L local
and `num_global_layers` gated global blocks (no attention biases), a projector from (intermediate layers
+ 1) x h to H. The decoder's cross-attention layers (`cross_attention_layers`) are the generic rule.
Its profile run is not modelled (the plan says so)."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.tower import Tower
from kvplan.spec.vit import VitDims, pos_int


def mllama_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h, inter, p = d.hidden, d.intermediate, d.patch
    positions = (pos_int(v, "image_size", default=448) // p) ** 2 + 1
    tiles, ratios = pos_int(v, "max_num_tiles", default=4), len(v.get("supported_aspect_ratios") or []) + 1
    embeddings = h + d.channels * p * p * h + 1 + positions * h + ratios * tiles * positions * h \
        + 2 * (1 + ratios * tiles * h)
    block = 4 * h * h + 2 * h * inter + inter + h + 4 * h
    out = pos_int(v, "vision_output_dim", default=(len(v.get("intermediate_layers_indices") or []) + 1) * h)
    globals_ = pos_int(v, "num_global_layers") * (block + 2)
    return embeddings + 4 * h + d.layers * block + globals_ + out * text_hidden + text_hidden


TOWER = Tower("mllama", vision_types=("mllama_vision_model",), carriers=("mllama",), params=mllama_params)
