"""DBRX (`dbrx`, vLLM dbrx.py): attention and MoE keys nested under `attn_config` (kv_n_heads) and
`ffn_config` (ffn_hidden_size, moe_num_experts, moe_top_k), lifted to the usual names."""
from __future__ import annotations

from typing import Any

from kvplan.spec.config_section import section
from kvplan.spec.families.family import Family


def lift_dbrx_keys(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    attn = section(cfg, "attn_config")
    ffn = section(cfg, "ffn_config")
    lifted = {"num_key_value_heads": attn.get("kv_n_heads"), "moe_intermediate_size": ffn.get("ffn_hidden_size"),
              "num_local_experts": ffn.get("moe_num_experts"), "num_experts_per_tok": ffn.get("moe_top_k")}
    return {**cfg, **{k: v for k, v in lifted.items() if v is not None and cfg.get(k) is None}}


FAMILY = Family(frozenset({"dbrx"}), "vllm/model_executor/models/dbrx.py", normalize=lift_dbrx_keys)
