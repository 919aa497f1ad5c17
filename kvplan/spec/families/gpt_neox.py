"""GPT-NeoX / Pythia (`gpt_neox`, vLLM gpt_neox.py): LayerNorms with biases, biased q/k/v and output
projections, an up/down GELU MLP."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"gpt_neox"}),
    "vllm/model_executor/models/gpt_neox.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True, qkv_bias=True, o_bias=True),
)
