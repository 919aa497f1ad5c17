"""Parameters of a multimodal model's encoders: the vision tower and the projector that feeds the
text decoder, counted from the config's `vision_config` (vLLM loads them beside the decoder, in
16-bit even when the decoder's linear layers are quantized). Each tower family counts itself
(kvplan.spec.families: siglip, pixtral, qwen_vision, moonvit, mllama, internvl, glm4v, gemma4,
gemma3n); a tower no family owns (Llama-4, LLaVA-style, ...) gets the generic ViT count
(kvplan.spec.vit), an approximation the plan's warnings name. Audio towers other than Gemma-3n's
are not counted yet.
"""
from __future__ import annotations

import json
from typing import Any

from kvplan.errors import KvplanError
from kvplan.spec.families import tower_of
from kvplan.spec.vit import generic_vit, pos_int
from kvplan.validation import short_repr


def encoder_family(outer: dict[str, Any]) -> str | None:
    """The vision tower's family name ("generic" when no family owns it), or None without a vision tower."""
    vision = outer.get("vision_config")
    if not isinstance(vision, dict) or not pos_int(vision, "hidden_size", "embed_dim"):
        return None
    tower = tower_of(outer)
    return tower.name if tower is not None else "generic"


def encoder_is_exact(outer: dict[str, Any]) -> bool:
    tower = tower_of(outer) if encoder_family(outer) else None
    return tower is not None and tower.exact


def encoder_gap(outer: dict[str, Any]) -> str | None:
    """What the encoder weight count leaves out or approximates, for the plan's warnings (None: exact)."""
    family = encoder_family(outer)
    tower = tower_of(outer) if family else None
    notes = []
    if tower is not None and tower.gap is not None:
        notes.append(tower.gap(outer))
    elif family == "generic":
        notes.append("the vision tower is counted as a generic ViT from vision_config (approximate)")
    if isinstance(outer.get("audio_config"), dict) and not (tower is not None and tower.counts_audio):
        notes.append("the audio tower (audio_config) is not counted: weights are under-predicted by its size")
    return "; ".join(notes) or None


def encoder_description(outer: dict[str, Any]) -> str:
    """What the encoder parameters are, for the estimate's weights row."""
    tower = tower_of(outer) if encoder_family(outer) else None
    return "audio tower + embedders" if tower is not None and tower.counts_audio else "vision tower + projector"


def encoder_params(outer: dict[str, Any], text_hidden: int) -> int:
    """Vision tower + projector parameters (0 without a `vision_config`)."""
    family = encoder_family(outer)
    if family is None:
        return 0
    v = outer["vision_config"]
    tower = tower_of(outer)
    if tower is None or tower.params is None:
        return generic_vit(v, text_hidden)
    return tower.params(outer, v, text_hidden)


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
