"""A vision tower's dimensions read from `vision_config` (the keys Hugging Face towers name them by), and
the ViT block arithmetic several towers share; each tower family counts itself (kvplan.spec.families)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def pos_int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    """The first of `keys` set to a positive number, as an int; else `default`."""
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return default


@dataclass(frozen=True)
class VitDims:
    hidden: int  # h
    intermediate: int  # I: the MLP width
    layers: int  # L
    patch: int  # p
    channels: int  # C
    temporal: int  # t: frames per temporal patch (video towers)
    merge: int  # m: spatial merge of patches into one LM token
    out: int  # the merger's output width (default: the text hidden size)

    @classmethod
    def of(cls, v: dict[str, Any], text_hidden: int) -> VitDims:
        h = pos_int(v, "hidden_size", "embed_dim")
        return cls(h, pos_int(v, "intermediate_size", default=4 * h), pos_int(v, "num_hidden_layers", "depth"),
                   pos_int(v, "patch_size", "spatial_patch_size", default=14),
                   pos_int(v, "num_channels", "in_chans", "in_channels", default=3),
                   pos_int(v, "temporal_patch_size", default=2), pos_int(v, "spatial_merge_size", default=2),
                   pos_int(v, "out_hidden_size", default=text_hidden))


def siglip_blocks(h: int, inter: int, layers: int) -> int:
    """`layers` pre-norm ViT blocks with biases: 4 (h^2 + h) attention, 2 h I + I + h MLP, two LayerNorms."""
    return layers * (4 * (h * h + h) + 2 * h * inter + inter + h + 4 * h)


def generic_vit(v: dict[str, Any], text_hidden: int) -> int:
    """An approximate count for a tower no family describes: siglip blocks (global layers included),
    the patch embedding and one projection to the text width."""
    d = VitDims.of(v, text_hidden)
    layers = d.layers + pos_int(v, "num_global_layers")
    return d.channels * d.patch * d.patch * d.hidden + siglip_blocks(d.hidden, d.intermediate, layers) \
        + d.hidden * text_hidden
