"""`Family`: what a family module provides to the generic spec code (each part optional)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvplan.spec.layers import LayerAttention

# layers(cfg, n_layers, n_heads, head_dim, where) -> what each decoder layer caches
LayersRule = Callable[[dict[str, Any], int, int, int, str], tuple[LayerAttention, ...]]
# counts(cfg, n_layers, hidden, n_heads, head_dim, vocab, where) -> ParamCount fields
CountsRule = Callable[[dict[str, Any], int, int, int, int, int, str], dict[str, int]]


@dataclass(frozen=True)
class Family:
    model_types: frozenset[str]
    vllm_source: str  # the vLLM model file the rules follow
    layers: LayersRule | None = None
    counts: CountsRule | None = None
    read_keys: frozenset[str] = frozenset()  # config keys the family reads (not "unread" for the warning)
