"""CodeGen (`codegen`, transformers modeling_codegen.py): LayerNorms with biases, an up/down MLP with
biases."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"codegen"}),
    "vllm/model_executor/models/gpt_j.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True, mlp_bias=True),
)
