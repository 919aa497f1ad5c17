"""GLM-4.1V / 4.5V / 4.6V's tower (vLLM glm4_1v.py): positions (image / p)^2 h, a patch conv3d + bias, L
blocks (2 RMSNorms, qkv 3h^2, proj h^2, a gated MLP 3 h O; O: out_hidden_size), two norms, a conv2d
downsample h m^2 x O + O, a merger (proj O x O, LayerNorm, gated MLP O x intermediate_size). Its profile
run is not modelled (the plan says so)."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.tower import Tower
from kvplan.spec.vit import VitDims, pos_int


def glm4v_params(outer: dict[str, Any], v: dict[str, Any], text_hidden: int) -> int:
    d = VitDims.of(v, text_hidden)
    h, p, m = d.hidden, d.patch, d.merge
    out, inter = pos_int(v, "out_hidden_size", default=4096), pos_int(v, "intermediate_size", default=4 * h)
    positions = (pos_int(v, "image_size", default=336) // p) ** 2
    block = 2 * h + 4 * h * h + (3 * h if v.get("attention_bias") else 0) + 3 * h * out
    tower = positions * h + d.channels * d.temporal * p * p * h + h + d.layers * block + 2 * h
    return tower + h * out * m * m + out + out * out + 2 * out + 3 * out * inter


TOWER = Tower("glm4v", vision_types=("glm4v*",), carriers=("glm4v*", "glm46v*"), params=glm4v_params)
