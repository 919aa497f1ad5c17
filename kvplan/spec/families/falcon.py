"""Falcon (`falcon`, vLLM falcon.py; transformers `num_kv_heads = ... if (new_decoder_architecture or not
multi_query) else 1`): Falcon-7B is multi-query whatever `n_head_kv` says and runs attention and MLP in
parallel behind one LayerNorm; Falcon-40B/180B (`new_decoder_architecture`) use `num_kv_heads` and two
norms. LayerNorms with biases, an up/down GELU MLP, a tied LM head; class defaults from FalconConfig."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Geometry, Traits
from kvplan.spec.families.phi import parallel_norms
from kvplan.spec.geometry import head_dim, require_int


def falcon_geometry(cfg: dict[str, Any], hidden: int, where: str) -> Geometry | None:
    if cfg.get("new_decoder_architecture") or not cfg.get("multi_query", True):
        return None  # the generic reading: num_kv_heads
    n_heads = require_int(cfg, "num_attention_heads", where)
    return Geometry(n_heads, 1, head_dim(cfg, hidden, n_heads, where))


FAMILY = Family(
    frozenset({"falcon"}),
    "vllm/model_executor/models/falcon.py",
    checked="hand",
    defaults={"max_position_embeddings": 2048, "multi_query": True, "new_decoder_architecture": False},
    geometry=falcon_geometry,
    traits=Traits(gated_mlp=False, layernorm_bias=True, tied_by_default=True, norms_per_layer=parallel_norms),
)
