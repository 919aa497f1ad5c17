"""nanochat (`nanochat`): a small decoder whose MLP is up/down with ReLU^2 (no gate)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(frozenset({"nanochat"}), "vllm/model_executor/models/nanochat.py", checked="transformers",
                traits=Traits(gated_mlp=False))
