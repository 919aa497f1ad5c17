"""MiniMax-M3 (`model_type: minimax_m3`), block-sparse attention over a full KV cache:

    every layer    full attention, `num_key_value_heads` x `head_dim` K and V per token, per-head
                   q/k RMSNorms (`qk_norm_type: per_head`)
    sparse_attention_config.sparse_attention_freq[i] = 1
                   the layer picks `sparse_topk_blocks` blocks of `sparse_block_size` tokens by an
                   index score: `sparse_num_index_heads` index queries against one cached index key
                   of `sparse_index_dim` per token (and an index value unless
                   `sparse_disable_index_value[i]`), kept beside K and V in the layer's cache dtype
                   and on every TP rank (one key, not split by heads)
    moe_layer_freq[i] = 1
                   MoE: `num_local_experts` of `moe_intermediate_size` (4 per token), a sigmoid router
                   with a bias, `n_shared_experts` of `shared_intermediate_size`; else a dense MLP of
                   `dense_intermediate_size`
    num_mtp_modules / num_nextn_predict_layers: draft layers, not part of the served decoder

Checked on MiniMax-M3: 60 x 2 x 4 x 128 x 2 B = 122,880 B of K and V per token plus 57 sparse
layers x 128 x 2 B = 14,592 B of index keys: 137,472 B per token (bf16).
"""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache import FullAttention, IndexedSparse
from kvplan.spec.families.family import Family
from kvplan.spec.layer import Layer


def _sparse(cfg: dict[str, Any], n_layers: int, where: str) -> tuple[list[int], list[int], int]:
    """(sparse flag per layer, index value disabled per layer, index dim)."""
    sac = cfg.get("sparse_attention_config") or {}
    if not isinstance(sac, dict):
        raise ConfigError(f"{where}: sparse_attention_config must be an object")
    if not sac.get("use_sparse_attention", True) or not sac:
        return [0] * n_layers, [1] * n_layers, 0
    flags: Any = sac.get("sparse_attention_freq")
    no_value: Any = sac.get("sparse_disable_index_value", [1] * n_layers)
    for key, value in (("sparse_attention_freq", flags), ("sparse_disable_index_value", no_value)):
        if not isinstance(value, list) or len(value) != n_layers or any(v not in (0, 1) for v in value):
            raise ConfigError(
                f"{where}: sparse_attention_config.{key} must list 0 or 1 for each of the {n_layers} layers"
            )
    dim = sac.get("sparse_index_dim")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise ConfigError(f"{where}: sparse_attention_config.sparse_index_dim must be a positive integer")
    return flags, no_value, dim


def m3_layers(
    cfg: dict[str, Any], n_layers: int, n_heads: int, head_dim: int, where: str
) -> tuple[Layer, ...]:
    kv = int(cfg.get("num_key_value_heads") or n_heads)
    flags, no_value, dim = _sparse(cfg, n_layers, where)
    full = FullAttention(kv, head_dim, head_dim)
    return tuple(Layer.of(IndexedSparse(full, index_dim=dim * (1 if nv else 2)) if s else full)
                 for s, nv in zip(flags, no_value))


def m3_counts(cfg: dict[str, Any], n_layers: int, hidden: int, n_heads: int, head_dim: int, vocab: int,
              where: str) -> dict[str, int]:
    kv = int(cfg.get("num_key_value_heads") or n_heads)
    flags, _, dim = _sparse(cfg, n_layers, where)
    index_heads = int((cfg.get("sparse_attention_config") or {}).get("sparse_num_index_heads") or 0)
    moe = cfg.get("moe_layer_freq")
    if not isinstance(moe, list) or len(moe) != n_layers:
        raise ConfigError(f"{where}: moe_layer_freq must list 0 or 1 for each of the {n_layers} layers")
    n_exp, k = int(cfg.get("num_local_experts") or 0), int(cfg.get("num_experts_per_tok") or 0)
    expert = 3 * hidden * int(cfg["moe_intermediate_size"])
    shared = int(cfg.get("n_shared_experts") or 0) * 3 * hidden * int(cfg.get("shared_intermediate_size") or 0)
    dense = 3 * hidden * int(cfg.get("dense_intermediate_size") or cfg["intermediate_size"])
    per_attention = hidden * (n_heads + 2 * kv) * head_dim + n_heads * head_dim * hidden + 2 * head_dim
    attention = n_layers * per_attention + sum(flags) * hidden * (index_heads + 1) * dim  # index q and k projections
    mlp_dense = experts = experts_active = 0
    for is_moe in moe:
        if is_moe and n_exp:
            experts += n_exp * expert
            experts_active += k * expert
            mlp_dense += shared + hidden * n_exp + (n_exp if cfg.get("use_routing_bias") else 0)
        else:
            mlp_dense += dense
    return dict(embedding=vocab * hidden, lm_head=0 if cfg.get("tie_word_embeddings") else vocab * hidden,
                attention=attention, mlp_dense=mlp_dense, experts=experts, experts_active=experts_active,
                norms=(2 * n_layers + 1) * hidden)


FAMILY = Family(
    frozenset({"minimax_m3"}),
    "vllm/model_executor/models/minimax_m3.py", checked="hand",
    layers=m3_layers,
    counts=m3_counts,
    read_keys=frozenset(
        {
            "sparse_attention_config",
            "dense_intermediate_size",
            "moe_layer_freq",
            "shared_intermediate_size",
            "num_mtp_modules",
            "use_routing_bias",
            "qk_norm_type",
            "use_gemma_norm",
            "swiglu_alpha",
            "swiglu_limit",
        }
    ),
    note="MiniMax-M3's index keys are planned in the KV cache dtype on every TP rank beside K and V "
    "(one sparse_index_dim key per token on the sparse layers); where vLLM keeps them is not decided "
    "from its source here",
)
