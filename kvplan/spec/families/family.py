"""`Family`: what a family module provides to the generic spec code (each part optional)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvplan.spec.layer import Layer

# layers(cfg, n_layers, n_heads, head_dim, where) -> what each decoder layer caches
LayersRule = Callable[[dict[str, Any], int, int, int, str], tuple[Layer, ...]]
# counts(cfg, n_layers, hidden, n_heads, head_dim, vocab, where) -> ParamCount fields
CountsRule = Callable[[dict[str, Any], int, int, int, int, int, str], dict[str, int]]
# fp8_groups(cfg) -> WeightQuant.groups of a plain fp8 checkpoint whose own keys say more (or ())
GroupsRule = Callable[[dict[str, Any]], tuple[tuple[str, int, int], ...]]
# tp_norm_allreduces(cfg, n_layers) -> all-reduces over the TP group a forward pass adds beyond two per layer
NormsRule = Callable[[dict[str, Any], int], int]


@dataclass(frozen=True)
class Family:
    model_types: frozenset[str]
    vllm_source: str  # the vLLM model file the rules follow
    layers: LayersRule | None = None
    counts: CountsRule | None = None
    fp8_groups: GroupsRule | None = None
    tp_norm_allreduces: NormsRule | None = None
    note: str = ""  # what the plan approximates for this family (a warning on every plan of it)
    read_keys: frozenset[str] = frozenset()  # config keys the family reads (not "unread" for the warning)
    architectures: frozenset[str] = frozenset()  # also owned when `architectures[0]` is one of these
