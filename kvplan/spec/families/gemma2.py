"""Gemma 2 (`gemma2`, vLLM gemma2.py; transformers `is_sliding = not bool(layer_idx % 2)`): sliding
window on even layers, full attention on odd ones; four norms per layer (around attention and MLP,
before and after); class defaults head_dim 256, tied LM head, 8,192 positions."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def alternate_windows(cfg: dict[str, Any], n_layers: int, window: int) -> list[int | None]:
    return [window if i % 2 == 0 else None for i in range(n_layers)]


FAMILY = Family(
    frozenset({"gemma2"}),
    "vllm/model_executor/models/gemma2.py",
    checked="transformers",
    defaults={"tie_word_embeddings": True, "head_dim": 256, "max_position_embeddings": 8192},
    windows=alternate_windows,
    traits=Traits(norms_per_layer=4),
)
