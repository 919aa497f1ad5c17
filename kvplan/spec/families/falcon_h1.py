"""Falcon-H1 (`falcon_h1`, vLLM falcon_h1.py): every layer runs attention and a Mamba2 mixer side by
side, so each caches K/V and holds a state; the mixer's gated norm over the inner width exists only
with `mamba_rms_norm` (default off)."""
from __future__ import annotations

from kvplan.spec.families.family import Family, Traits

FAMILY = Family(
    frozenset({"falcon_h1"}),
    "vllm/model_executor/models/falcon_h1.py",
    checked="transformers",
    layer_words=lambda cfg, n, where: ["full+mamba2"] * n,
    traits=Traits(mamba_inner_norm=lambda cfg: bool(cfg.get("mamba_rms_norm"))),
)
