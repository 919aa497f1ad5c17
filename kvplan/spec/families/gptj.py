"""GPT-J (`gptj`, vLLM gpt_j.py): LayerNorms with biases, an up/down GELU MLP."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"gptj"}),
    "vllm/model_executor/models/gpt_j.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True),
)
