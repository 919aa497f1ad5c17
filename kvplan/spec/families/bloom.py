"""BLOOM (`bloom`, vLLM bloom.py): LayerNorms with biases, biased q/k/v and output projections, an
up/down GELU MLP."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"bloom"}),
    "vllm/model_executor/models/bloom.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True, qkv_bias=True, o_bias=True),
)
