"""GPT-2 (`gpt2`, vLLM gpt2.py): learned position embeddings (`n_positions`), LayerNorms with biases,
biased q/k/v, output and MLP projections, an up/down GELU MLP, the LM head tied to the embedding;
class default 1,024 positions."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def gpt2_positions(cfg: dict[str, Any]) -> int:
    return int(cfg.get("n_positions") or cfg.get("max_position_embeddings") or 1024)


FAMILY = Family(
    frozenset({"gpt2"}),
    "vllm/model_executor/models/gpt2.py",
    checked="transformers",
    defaults={"max_position_embeddings": 1024, "tie_word_embeddings": True},
    traits=Traits(gated_mlp=False, layernorm_bias=True, qkv_bias=True, o_bias=True, mlp_bias=True,
                  tied_by_default=True, positions=gpt2_positions),
)
