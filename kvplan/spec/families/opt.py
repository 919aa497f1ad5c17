"""OPT (`opt`, vLLM opt.py): learned positions with an offset of 2 (max_position_embeddings + 2 rows),
LayerNorms with biases, biased projections, an up/down ReLU MLP, the LM head tied to the embedding."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def opt_positions(cfg: dict[str, Any]) -> int:
    return int(cfg.get("max_position_embeddings", 2048)) + 2


FAMILY = Family(
    frozenset({"opt"}),
    "vllm/model_executor/models/opt.py",
    checked="transformers",
    defaults={"tie_word_embeddings": True},
    traits=Traits(gated_mlp=False, layernorm_bias=True, qkv_bias=True, o_bias=True, mlp_bias=True,
                  tied_by_default=True, positions=opt_positions),
)
