"""Phi-1/2 (`phi`, vLLM phi.py): one LayerNorm (with bias) per layer, attention and MLP in parallel,
biased projections, an up/down GELU MLP, a biased LM head."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def parallel_norms(cfg: dict[str, Any]) -> int:
    """One norm before attention and MLP in parallel (Phi, Falcon-7B); two in Falcon's new decoder."""
    return 2 if cfg.get("new_decoder_architecture") else 1


FAMILY = Family(
    frozenset({"phi"}),
    "vllm/model_executor/models/phi.py",
    checked="transformers",
    traits=Traits(gated_mlp=False, layernorm_bias=True, qkv_bias=True, o_bias=True, mlp_bias=True,
                  norms_per_layer=parallel_norms, lm_head_bias=True),
)
