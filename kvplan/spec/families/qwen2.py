"""Qwen2 and Qwen2-MoE (`qwen2`, `qwen2_moe`; vLLM qwen2.py / qwen2_moe.py): biased q/k/v projections;
`sliding_window` applies only with `use_sliding_window`, from layer `max_window_layers` on; 32,768
positions when the config names none (transformers' Qwen2Config)."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def qwen_windows(cfg: dict[str, Any], n_layers: int, window: int) -> list[int | None]:
    if not cfg.get("use_sliding_window", False):
        return [None] * n_layers
    first = int(cfg.get("max_window_layers", 0))
    return [window if i >= first else None for i in range(n_layers)]


FAMILY = Family(
    frozenset({"qwen2", "qwen2_moe"}),
    "vllm/model_executor/models/qwen2.py",
    checked="transformers",
    defaults={"max_position_embeddings": 32768},
    windows=qwen_windows,
    traits=Traits(qkv_bias=True),
)
