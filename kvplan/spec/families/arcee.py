"""Arcee / AFM (`arcee`, vLLM arcee.py): a Llama decoder whose MLP is up/down with ReLU^2 (no gate)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(frozenset({"arcee"}), "vllm/model_executor/models/arcee.py", checked="transformers",
                traits=Traits(gated_mlp=False))
