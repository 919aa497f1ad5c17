"""`Tower`: a vision (or audio) encoder family: its parameters, and the dummy batch vLLM's profile run
feeds it (kvplan.plan.encoder_profile), with the model types that name it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Config = dict[str, Any]


@dataclass(frozen=True)
class Tower:
    name: str
    vision_types: tuple[str, ...]  # vision_config model types ("siglip*": a prefix, siglip_vision_model too)
    carriers: tuple[str, ...] = ()  # decoder model types whose checkpoints carry it ("qwen3_5*": a prefix)
    # params(outer, vision, text_hidden) -> the tower's and its projector's parameters
    params: Callable[[Config, Config, int], int] | None = None
    exact: bool = True  # the count is the tower's (False: approximated or parts left out; `gap` says which)
    gap: Callable[[Config], str] | None = None  # what the count leaves out, for the plan's warnings
    counts_audio: bool = False  # `params` counts the audio tower too (else an audio_config is warned as uncounted)
    # profile(outer, vision, limits, max_model_len, max_pixels) -> {modality: (LM tokens, patches) of one item}
    profile: Callable[[Config, Config, dict[str, int], int, int | None], dict[str, tuple[int, int]]] | None = None
    temporal: bool = False  # patches span temporal_patch_size frames (Qwen-VL)
    replicated: bool = False  # TP does not split the ViT (MoonViT)
    gated_mlp: bool = False  # gate + up in each ViT block
    own_out_width: bool = False  # its merger writes `out_hidden_size`, not the text width
    deepstack: bool = False  # the cached output carries deepstack features (Qwen3-VL)

    def owns_vision_type(self, vision_type: str) -> bool:
        return _matches(vision_type, self.vision_types)

    def carried_by(self, decoder_type: str) -> bool:
        return _matches(decoder_type, self.carriers)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return bool(name) and any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)
