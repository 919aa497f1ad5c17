"""StarCoder2 (`starcoder2`, vLLM starcoder2.py): LayerNorms with biases, biased q/k/v and output
projections, an up/down GELU MLP; `sliding_window` on every layer."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"starcoder2"}),
    "vllm/model_executor/models/starcoder2.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True, qkv_bias=True, o_bias=True),
)
