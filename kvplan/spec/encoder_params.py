"""Parameters of a multimodal model's encoders: the vision tower and the projector that feeds the
text decoder, counted from the config's `vision_config` (vLLM loads them beside the decoder, in
16-bit even when the decoder's linear layers are quantized).

Per family, as the Hugging Face / vLLM modules build them (h: vision hidden, I: vision MLP width,
L: blocks, p: patch, C: channels, t: temporal patch, m: spatial merge, H: text hidden):
    siglip (Gemma-3)   patch conv C p^2 h + h, positions (image/p)^2 h, L x (4 (h^2 + h) attention with
                       biases, 2 (h I) + I + h MLP, two LayerNorms 4h), post LayerNorm 2h, the pooling
                       head unless vision_use_head is false;
                       Gemma-3 projector: h x H + RMSNorm h
    pixtral (Mistral-3) patch conv C p^2 h, ln_pre h, L x (4 h^2 + 3 h I + 2h) (no biases, gated MLP);
                       projector: RMSNorm h, patch merger (h m^2) x h, linear h x H, linear H x H
    qwen2_5_vl         patch conv3d C t p^2 h, L x (3h^2 + 3h + h^2 + h attention, 3 (h I) + 2I + h gated MLP,
                       2 RMSNorms 2h); merger RMSNorm h + (h m^2)^2 + h m^2 + h m^2 x H + H
    qwen2_vl           patch conv3d C t p^2 h (h: embed_dim), L x siglip blocks (I = mlp_ratio h); merger
                       LayerNorm 2h + (h m^2)^2 + h m^2 + h m^2 x H + H (H: vision_config.hidden_size)
    qwen3_vl           patch conv3d C t p^2 h + h, positions n h, L x (4 (h^2 + h) + 2 h I + I + h + 4h);
                       merger and each deepstack merger: LayerNorm + (h m^2)^2 + h m^2 + h m^2 x H + H
    moonvit (Kimi-VL)  siglip blocks, patch conv + h, 64 x 64 positions; projector LayerNorm 2h +
                       (4h)^2 + 4h + 4h x H + H
    glm4v (GLM-4.xV)   positions (image/p)^2 h, patch conv3d + bias, L x (2 RMSNorms, qkv 3h^2, proj h^2,
                       gated MLP 3 h O; O: out_hidden_size), two norms, conv2d downsample h m^2 x O + O,
                       merger O^2 + LayerNorm 2 O + gated 3 O x intermediate_size
    internvl           InternViT + pixel-shuffle projector (`_internvl`)
    mllama             Llama-3.2-Vision's tiled ViT with global layers (`_mllama`)
    gemma4             kvplan.spec.gemma4_params (exact)
    gemma3n            the audio tower and both embedders (kvplan.spec.gemma3n_params); the timm
                       MobileNetV5 vision tower is not counted (not exact)
Other vision towers (Llama-4, LLaVA-style, ...) get the generic ViT count (siglip blocks, global layers
included, and an h x H projector): an approximation, said so by `encoder_is_exact`.
Other audio towers are not counted yet.
"""
from __future__ import annotations

import json
from typing import Any

from kvplan.errors import KvplanError
from kvplan.spec.gemma3n_params import audio_params, vision_embedder_params
from kvplan.spec.gemma4_params import vision_params as gemma4_vision_params
from kvplan.validation import short_repr

_EXACT = {
    "siglip",
    "pixtral",
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "moonvit",
    "gemma4",
    "glm4v",
    "internvl",
    "mllama",
}  # gemma3n: its timm vision tower is not counted


def _i(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return default


def _siglip_blocks(h: int, inter: int, layers: int) -> int:
    return layers * (4 * (h * h + h) + 2 * h * inter + inter + h + 4 * h)


def _family(outer: dict[str, Any], vision: dict[str, Any]) -> str:
    vt, mt = str(vision.get("model_type", "")), str(outer.get("model_type", ""))
    if vt.startswith("siglip") or mt == "gemma3":
        return "siglip"
    if vt == "pixtral" or mt in ("mistral3", "pixtral"):
        return "pixtral"
    if mt.startswith("qwen2_5_vl") or vt.startswith(("qwen2_5_vl", "qwen2_5_omni_vision")):
        return "qwen2_5_vl"
    if mt == "qwen2_vl" or vt.startswith("qwen2_vl"):
        return "qwen2_vl"
    # Qwen3.5 and Qwen3-Omni's thinker reuse the Qwen3-VL ViT
    if mt.startswith(("qwen3_vl", "qwen3_5")) or vt.startswith(("qwen3_vl", "qwen3_5", "qwen3_omni_moe_vision")):
        return "qwen3_vl"
    if vt == "moonvit":
        return "moonvit"
    if vt == "mllama_vision_model" or mt == "mllama":
        return "mllama"
    if vt in ("internvl_vision", "intern_vit_6b"):
        return "internvl"
    if mt.startswith(("glm4v", "glm46v")) or vt.startswith("glm4v"):
        return "glm4v"
    if vt == "gemma4_vision":
        return "gemma4"
    if vt == "gemma3n_vision" or mt == "gemma3n":
        return "gemma3n"
    return "generic"


def _glm4v(v: dict[str, Any], h: int, layers: int, c: int, t: int, p: int, m: int) -> int:
    """GLM-4.1V / 4.5V / 4.6V: blocks whose gated MLP is out_hidden_size (O) wide, a conv2d downsample
    to O, and a merger (proj O x O, LayerNorm, gated MLP O x intermediate_size)."""
    out, inter = _i(v, "out_hidden_size", default=4096), _i(v, "intermediate_size", default=4 * h)
    positions = (_i(v, "image_size", default=336) // p) ** 2
    block = 2 * h + 4 * h * h + (3 * h if v.get("attention_bias") else 0) + 3 * h * out
    tower = positions * h + c * t * p * p * h + h + layers * block + 2 * h  # + post-conv and post norms
    return tower + h * out * m * m + out + out * out + 2 * out + 3 * out * inter


def _mllama(v: dict[str, Any], h: int, inter: int, layers: int, c: int, p: int, text_hidden: int) -> int:
    """Llama-3.2-Vision: class token, patch conv, gated position and tile embeddings (one row per
    supported aspect ratio + 1, over max_num_tiles tiles), two LayerNorms, L local and num_global_layers
    gated global blocks (no attention biases), projector from (intermediate layers + 1) x h to H."""
    positions = (_i(v, "image_size", default=448) // p) ** 2 + 1
    tiles, ratios = _i(v, "max_num_tiles", default=4), len(v.get("supported_aspect_ratios") or []) + 1
    embeddings = h + c * p * p * h + 1 + positions * h + ratios * tiles * positions * h + 2 * (1 + ratios * tiles * h)
    block = 4 * h * h + 2 * h * inter + inter + h + 4 * h
    out = _i(v, "vision_output_dim", default=(len(v.get("intermediate_layers_indices") or []) + 1) * h)
    return (
        embeddings + 4 * h + layers * block + _i(v, "num_global_layers") * (block + 2) + out * text_hidden + text_hidden
    )


def _side(value: Any, default: int) -> int:
    """image_size / patch_size as one number or a [height, width] pair (square assumed)."""
    if isinstance(value, list) and value:
        value = value[0]
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else default


def _internvl(outer: dict[str, Any], v: dict[str, Any], h: int, inter: int, layers: int, c: int, p: int,
              text_hidden: int) -> int:
    """InternViT (InternVL 2.5 / 3, HF and original layouts): cls + positions + patch conv, blocks with two
    layer-scale vectors, q/k/v (+ biases, + q/k norms), output projection, MLP and two norms; projector:
    LayerNorm over the pixel-shuffled width s h (s = (1 / downsample_ratio)^2), then s h x H and H x H."""
    p = _side(v.get("patch_size"), p)
    positions = (_side(v.get("image_size"), 448) // p) ** 2 + 1
    norm = h if v.get("norm_type") == "rms_norm" else 2 * h
    qkv_bias = 3 * h if v.get("attention_bias") or v.get("qkv_bias") else 0
    qk_norm = 2 * h if v.get("use_qk_norm") or v.get("qk_normalization") else 0  # RMSNorms, weight only
    block = 2 * h + 3 * h * h + qkv_bias + qk_norm + h * h + h + 2 * h * inter + inter + h + 2 * norm
    shuffle = round(1 / float(outer.get("downsample_ratio") or 0.5)) ** 2
    projector = 2 * shuffle * h + shuffle * h * text_hidden + text_hidden + text_hidden * text_hidden + text_hidden
    return h + positions * h + c * p * p * h + h + layers * block + projector


def encoder_family(outer: dict[str, Any]) -> str | None:
    """The vision tower's family (module doc), or None when the config has no vision tower."""
    vision = outer.get("vision_config")
    if not isinstance(vision, dict) or not _i(vision, "hidden_size", "embed_dim"):
        return None
    return _family(outer, vision)


def encoder_is_exact(outer: dict[str, Any]) -> bool:
    return encoder_family(outer) in _EXACT


def encoder_gap(outer: dict[str, Any]) -> str | None:
    """What the encoder weight count leaves out or approximates, for the plan's warnings (None: exact)."""
    family = encoder_family(outer)
    notes = []
    if family == "gemma3n":
        arch = (outer.get("vision_config") or {}).get("architecture") or "MobileNetV5"
        notes.append(f"the vision tower (timm {arch}, named but not described by config.json) is not counted: "
                     "weights are under-predicted by its size")
    elif family == "generic":
        notes.append("the vision tower is counted as a generic ViT from vision_config (approximate)")
    if isinstance(outer.get("audio_config"), dict) and family != "gemma3n":
        notes.append("the audio tower (audio_config) is not counted: weights are under-predicted by its size")
    return "; ".join(notes) or None


def _qwen_vl(family: str, v: dict[str, Any], h: int, inter: int, layers: int, c: int, t: int, p: int, m: int,
             out: int, text_hidden: int) -> int:
    """Qwen2-VL, Qwen2.5-VL (and Qwen2.5-Omni's) and Qwen3-VL / Qwen3.5 towers with their mergers."""
    if family == "qwen2_5_vl":
        block = 4 * h * h + 4 * h + 3 * h * inter + 2 * inter + h + 2 * h
        hm = h * m * m
        return c * t * p * p * h + layers * block + h + hm * hm + hm + hm * out + out
    if family == "qwen2_vl":  # h is embed_dim (hidden_size is the text model's width), LayerNorm ViT blocks
        h, hm = _i(v, "embed_dim"), _i(v, "embed_dim") * m * m
        out = _i(v, "hidden_size", default=text_hidden)
        blocks = _siglip_blocks(h, h * _i(v, "mlp_ratio", default=4), _i(v, "depth"))
        return c * t * p * p * h + blocks + 2 * h + hm * hm + hm + hm * out + out
    assert family == "qwen3_vl", family  # _family names no other Qwen tower
    block = 4 * (h * h + h) + 2 * h * inter + inter + h + 4 * h
    hm = h * m * m
    merger = hm * hm + hm + hm * out + out
    deepstack = len(v.get("deepstack_visual_indexes") or [])
    tower = c * t * p * p * h + h + _i(v, "num_position_embeddings") * h + layers * block
    return tower + (2 * h + merger) + deepstack * (2 * hm + merger)


def encoder_params(outer: dict[str, Any], text_hidden: int) -> int:
    """Vision tower + projector parameters (0 without a `vision_config`)."""
    family = encoder_family(outer)
    if family is None:
        return 0
    v = outer["vision_config"]
    h = _i(v, "hidden_size", "embed_dim")
    inter = _i(v, "intermediate_size", default=4 * h)
    layers = _i(v, "num_hidden_layers", "depth")
    p, c = (
        _i(v, "patch_size", "spatial_patch_size", default=14),
        _i(v, "num_channels", "in_chans", "in_channels", default=3),
    )
    t, m = _i(v, "temporal_patch_size", default=2), _i(v, "spatial_merge_size", default=2)
    out = _i(v, "out_hidden_size", default=text_hidden)
    if family == "siglip":
        positions = (_i(v, "image_size", default=224) // p) ** 2
        tower = c * p * p * h + h + positions * h + _siglip_blocks(h, inter, layers) + 2 * h
        if v.get("vision_use_head", True):  # SigLIP's pooling head (Gemma-3 checkpoints turn it off)
            tower += h + 4 * (h * h + h) + 2 * h + 2 * h * inter + inter + h
        return tower + h * text_hidden + h  # Gemma-3 mm_input_projection + mm_soft_emb_norm
    if family == "pixtral":
        merge = _i(outer, "spatial_merge_size", default=2)
        bias = text_hidden if outer.get("multimodal_projector_bias") else 0
        tower = c * p * p * h + h + layers * (4 * h * h + 3 * h * inter + 2 * h)
        return tower + h + h * merge * merge * h + h * text_hidden + bias + text_hidden * text_hidden + bias
    if family.startswith(("qwen2", "qwen3")):
        return _qwen_vl(family, v, h, inter, layers, c, t, p, m, out, text_hidden)
    if family == "moonvit":
        k = 1
        for side in v.get("merge_kernel_size") or [2, 2]:
            k *= int(side)
        tower = c * p * p * h + h + 64 * 64 * h + _siglip_blocks(h, inter, layers) + 2 * h
        hk = h * k
        return tower + 2 * h + hk * hk + hk + hk * text_hidden + text_hidden
    if family == "mllama":
        return _mllama(v, h, inter, layers, c, p, text_hidden)
    if family == "internvl":
        return _internvl(outer, v, h, inter, layers, c, p, text_hidden)
    if family == "glm4v":
        return _glm4v(v, h, layers, c, t, p, m)
    if family == "gemma4":
        return gemma4_vision_params(v, text_hidden)
    if family == "gemma3n":
        return vision_embedder_params(v, text_hidden) + audio_params(outer.get("audio_config") or {}, text_hidden)
    # generic ViT (approximate): siglip blocks incl. global layers, patch embedding, one projection
    layers += _i(v, "num_global_layers")
    return c * p * p * h + _siglip_blocks(h, inter, layers) + h * text_hidden


# --- --limit-mm-per-prompt ------------------------------------------------------------------------------
VISION_MODALITIES = ("image", "video")


def parse_mm_limits(text: str) -> dict[str, int]:
    """vLLM's --limit-mm-per-prompt: JSON ('{"image": 0, "video": 0}') or the older 'image=0,video=0'."""
    flag = "--limit-mm-per-prompt"
    try:
        raw = (
            json.loads(text)
            if text.strip().startswith("{")
            else dict(p.split("=", 1) for p in text.split(",") if p.strip())
        )
        limits = {str(k).strip(): int(v if not isinstance(v, dict) else v.get("count", 1)) for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        raise KvplanError(f"{flag} takes JSON like '{{\"image\": 0}}' or image=0,video=0, got {text!r}") from None
    if not limits or any(not 0 <= v <= 2**16 for v in limits.values()):
        raise KvplanError(f"{flag} takes counts per modality in 0..65,536, got {short_repr(text)}")
    return limits


def vision_tower_loaded(limits: dict[str, int] | None) -> bool:
    """vLLM builds no vision tower when images and videos are both limited to 0 (e.g. Qwen2.5-VL's
    `if get_limit_per_prompt("image") or get_limit_per_prompt("video")`): a text-only deployment."""
    if not limits:
        return True
    return any(limits.get(m, 1) for m in VISION_MODALITIES)


def parse_mm_processor_kwargs(text: str) -> tuple[int | None, list[str]]:
    """vLLM's --mm-processor-kwargs (a JSON object): (`max_pixels`, which bounds a Qwen-VL image and so
    the profile run's encoder batch; the other keys, which kvplan does not model)."""
    flag = "--mm-processor-kwargs"
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if not isinstance(raw, dict):
        raise KvplanError(f"{flag} takes a JSON object like '{{\"max_pixels\": 1003520}}', got {text[:80]!r}")
    pixels = raw.get("max_pixels")
    if pixels is not None and (not isinstance(pixels, int) or isinstance(pixels, bool) or pixels <= 0):
        raise KvplanError(f"{flag}: max_pixels must be a positive integer, got {pixels!r}")
    return pixels, sorted(str(k) for k in raw if k != "max_pixels")
