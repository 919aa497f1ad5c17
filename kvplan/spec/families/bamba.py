"""Bamba (`bamba`, vLLM bamba.py): attention at `attn_layer_indices`, Mamba2 elsewhere (transformers 5
writes `layer_types` instead, read by the generic rule)."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family


def bamba_words(cfg: dict[str, Any], n_layers: int, where: str) -> list[str] | None:
    if cfg.get("layer_types"):
        return None
    attn = set(cfg.get("attn_layer_indices") or [])
    return ["full" if i in attn else "mamba2" for i in range(n_layers)]


FAMILY = Family(frozenset({"bamba"}), "vllm/model_executor/models/bamba.py", checked="transformers",
                layer_words=bamba_words)
