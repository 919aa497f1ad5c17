"""Nemotron-4 / Minitron (`nemotron`, vLLM nemotron.py): LayerNorm1P with biases, an up/down ReLU^2 MLP."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"nemotron"}),
    "vllm/model_executor/models/nemotron.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True),
)
