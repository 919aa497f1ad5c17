"""LFM2 and LFM2-MoE (`lfm2`, `lfm2_moe`; vLLM lfm2.py / lfm2_moe.py): attention at `full_attn_idxs`
(transformers' default: every layer), a gated short convolution elsewhere (transformers 5 writes
`layer_types`, read by the generic rule); per-head q/k norms; LFM2-MoE's first `num_dense_layers`
layers dense, then experts."""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family, Traits


def lfm2_words(cfg: dict[str, Any], n_layers: int, where: str) -> list[str] | None:
    if cfg.get("layer_types"):
        return None
    full = cfg.get("full_attn_idxs")
    full = set(range(n_layers)) if full is None else set(full)
    return ["full" if i in full else "short_conv" for i in range(n_layers)]


def lfm2_moe_plan(cfg: dict[str, Any], n_layers: int) -> list[str]:
    dense = int(cfg.get("num_dense_layers") or 0)
    return ["dense" if i < dense else "moe" for i in range(n_layers)]


FAMILIES = (
    Family(frozenset({"lfm2"}), "vllm/model_executor/models/lfm2.py", checked="transformers",
           layer_words=lfm2_words, traits=Traits(qk_norm=True)),
    Family(frozenset({"lfm2_moe"}), "vllm/model_executor/models/lfm2_moe.py", checked="hand",
           layer_words=lfm2_words, mlp_plan=lfm2_moe_plan, traits=Traits(qk_norm=True)),
)
