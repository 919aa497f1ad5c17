"""`EncoderProfile`: the multimodal part of vLLM V1's profile run, which the KV budget pays for.

Before the decoder's dummy forward, `GPUModelRunner.profile_run` (vllm/v1/worker/gpu_model_runner.py)
runs the vision encoder on a dummy batch and keeps its outputs in the encoder cache during the
decoder run, so the activation peak is max(encoder forward, encoder outputs + decoder forward).
The batch, from `compute_mm_encoder_budget` (vllm/v1/core/encoder_cache_manager.py) and
`MultiModalBudget` (vllm/v1/worker/utils.py; later vllm/multimodal/budget.py):
    T      LM tokens of one item of the maximum feature size (the modality with the largest T)
    B      encoder budget = max(max_num_batched_tokens, T)
    items  max(1, min(B // T, max_num_seqs * max(1, min(limit, max_model_len // T)))), limit 999 by default
The encoder sees items x patches ViT patches at once; each tower family (kvplan.spec.families) says
what one item of its dummy batch is (`Tower.profile`: SigLIP, Pixtral, Qwen2.5-VL, Qwen3-VL, MoonViT).
Peak of the encoder forward, per GPU, per patch (the widest point of one block; bf16 activations,
flash/SDPA attention, so no patches^2 matrix): pixels (C t p^2) + max(attention: residual + norm +
qkv + output = 2h + 4h/tp, MLP: residual + norm + output + up (x2 gated) + act = 3h + g I/tp), where
TP splits the qkv and MLP widths except in MoonViT (replicated). Towers without a profile
(Llama-4, GLM-4.xV, LLaVA-style, Mllama) are not modelled: the plan says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan.spec.encoder_params import encoder_family
from kvplan.spec.families import tower_of

DEFAULT_MM_LIMIT = 999  # vllm/config/multimodal.py: an unspecified modality


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


def encoder_profile(config: dict[str, Any], *, text_hidden: int, dtype_bytes: int, tp: int, max_num_batched_tokens: int,
                    max_num_seqs: int, max_model_len: int, limits: dict[str, int] | None = None,
                    max_pixels: int | None = None) -> EncoderProfile | None:
    """The encoder part of the profile run for a modelled vision tower (None: no tower, a tower
    not modelled, or every vision modality limited to 0). `max_pixels`: --mm-processor-kwargs'
    bound on a Qwen-VL image (smart_resize keeps floor(sqrt(max_pixels) / (p m)) merged cells a side)."""
    tower = tower_of(config) if encoder_family(config) else None
    if tower is None or tower.profile is None:
        return None
    v = config["vision_config"]
    limits = limits or {}
    items_of = tower.profile(config, v, limits, max_model_len, max_pixels)
    tokens = {m: t for m, t in items_of.items() if limits.get(m, DEFAULT_MM_LIMIT) > 0}
    if not tokens:
        return None
    modality, items = _items(tokens, limits, mnbt=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                             max_model_len=max_model_len)
    t, patches = tokens[modality]
    h = _i(v, "hidden_size", 0) or _i(v, "embed_dim", 1152)
    inter = _i(v, "intermediate_size", 4 * h)
    p, c = _i(v, "patch_size", 14), _i(v, "num_channels", 0) or _i(v, "in_channels", 0) or _i(v, "in_chans", 3)
    temporal = _i(v, "temporal_patch_size", 2) if tower.temporal else 1
    split = 1 if tower.replicated else tp
    gated = 3 if tower.gated_mlp else 2
    per_patch = c * temporal * p * p + max(2 * h + 4 * h // split, 3 * h + gated * inter // split)
    out_width = _i(v, "out_hidden_size", text_hidden) if tower.own_out_width else text_hidden
    deepstack = len(v.get("deepstack_visual_indexes") or []) if tower.deepstack else 0
    return EncoderProfile(tower.name, modality, t, patches, items, items * patches * per_patch * dtype_bytes,
                          items * t * out_width * (1 + deepstack) * dtype_bytes)
