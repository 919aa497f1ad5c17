"""Mamba and Falcon-Mamba (`mamba`, `falcon_mamba`): attention-free, every layer one Mamba v1 mixer with
one norm and no MLP (vLLM mamba.py); the LM head tied to the embedding unless the config says not."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Geometry, Traits


def no_attention(cfg: dict[str, Any], hidden: int, where: str) -> Geometry:
    return Geometry(0, 0, 0)


FAMILY = Family(
    frozenset({"mamba", "falcon_mamba"}),
    "vllm/model_executor/models/mamba.py",
    checked="transformers",
    geometry=no_attention,
    layer_words=lambda cfg, n, where: ["mamba1"] * n,
    mlp_plan=lambda cfg, n: ["none"] * n,
    traits=Traits(tied_by_default=True, one_norm_per_block=True),
)
