"""GPT-BigCode / StarCoder (`gpt_bigcode`, vLLM gpt_bigcode.py): LayerNorms with biases, an up/down
GELU MLP (not checked against transformers: warned)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"gpt_bigcode"}),
    "vllm/model_executor/models/gpt_bigcode.py",
    traits=Traits(gated_mlp=False, layernorm_bias=True),
)
