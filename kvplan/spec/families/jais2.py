"""Jais-2 (`jais2`): a Llama-shaped decoder whose MLP is up/down (no gate)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(frozenset({"jais2"}), "vllm/model_executor/models/jais.py", checked="transformers",
                traits=Traits(gated_mlp=False))
