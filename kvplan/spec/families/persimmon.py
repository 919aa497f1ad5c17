"""Persimmon (`persimmon`, vLLM persimmon.py): LayerNorms with biases, an up/down ReLU^2 MLP with
biases."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"persimmon"}),
    "vllm/model_executor/models/persimmon.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True, mlp_bias=True),
)
