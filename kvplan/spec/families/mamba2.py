"""Pure Mamba2 (`mamba2`): attention-free, every layer one Mamba2 mixer with one norm, no MLP (vLLM mamba2.py)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits
from kvplan.spec.families.mamba import no_attention

FAMILY = Family(
    frozenset({"mamba2"}),
    "vllm/model_executor/models/mamba2.py",
    checked="hand",
    geometry=no_attention,
    layer_words=lambda cfg, n, where: ["mamba2"] * n,
    mlp_plan=lambda cfg, n: ["none"] * n,
    traits=Traits(one_norm_per_block=True),
)
