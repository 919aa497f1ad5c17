"""Nemotron-H and Nemotron-3 (`nemotron_h`, vLLM nemotron_h.py):

    layers      `hybrid_override_pattern`, one character per block: M Mamba2, * attention, - MLP,
                E MoE (transformers 5 writes `layers_block_type` words instead: the generic layout
                rules read both); each block one norm
    mixer       intermediate = mamba_num_heads x mamba_head_dim; the SSM state cached in float16 unless
                `mamba_ssm_cache_dtype` says otherwise (vLLM's NemotronHForCausalLMConfig default)
    MLP/experts up and down with relu^2, no gate; a router score-correction bias; shared experts
                `shared_expert_intermediate_size` wide, no gate of their own
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.cache.state import RecurrentState
from kvplan.spec.families.family import Family, Traits
from kvplan.spec.state import config_int, mamba2_state


def nemotron_state(word: str, cfg: dict[str, Any], head_dim: int, where: str) -> RecurrentState | None:
    if word != "mamba2":
        return None
    heads = config_int(cfg, where, "mamba_n_heads", "mamba_num_heads", "num_heads")
    mamba_head_dim = config_int(cfg, where, "mamba_d_head", "mamba_head_dim", "head_dim")
    return mamba2_state(cfg, where, inner=heads * mamba_head_dim)


def nemotron_plan(cfg: dict[str, Any], n_layers: int) -> list[str]:
    return [{"-": "dense", "E": "moe"}.get(c, "none") for c in str(cfg.get("hybrid_override_pattern") or "")]


FAMILY = Family(
    frozenset({"nemotron_h"}),
    "vllm/model_executor/models/nemotron_h.py",
    checked="transformers",
    defaults={"mamba_ssm_cache_dtype": "float16"},
    state=nemotron_state,
    mlp_plan=nemotron_plan,
    traits=Traits(gated_mlp=False, gated_experts=False, one_norm_per_block=True, router_bias=True,
                  own_shared_width=True),
)
