"""MiMo-V2-Flash (`model_type: mimo_v2_flash`, XiaomiMiMo), as vLLM mimo_v2_flash.py builds it:

    hybrid_layer_pattern[i]   1: sliding-window attention (window `sliding_window`) with its own
                              geometry (swa_num_attention_heads, swa_num_key_value_heads,
                              swa_head_dim, swa_v_head_dim) and a per-head sink bias;
                              0: full attention (num_attention_heads, num_key_value_heads,
                              head_dim, v_head_dim)
    moe_layer_freq[i]         1: MoE (n_routed_experts of moe_intermediate_size, a sigmoid
                              router with a score-correction bias); 0: a dense gated MLP
    the KV cache pads V to the K head size (one head size per cache), so each cached head is
    2 x head_dim wide

Checked on MiMo-V2-Flash: 9 full layers x 4 KV heads x 2 x 192 x 2 B = 27,648 B per token that
grow with the request, and 39 sliding layers x 8 x 2 x 192 x 2 B = 239,616 B within the window of
128: 267,264 B per token of the first 128.
"""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache import FullAttention, SlidingWindow
from kvplan.spec.families.family import Family
from kvplan.spec.layer import Layer


def _flags(cfg: dict[str, Any], key: str, n_layers: int, where: str) -> list[int]:
    value = cfg.get(key)
    if not isinstance(value, list) or len(value) != n_layers or any(v not in (0, 1) for v in value):
        raise ConfigError(f"{where}: {key} must be a list of {n_layers} zeros and ones")
    return value


def _geometry(cfg: dict[str, Any], sliding: bool) -> tuple[int, int, int, int]:
    """(query heads, KV heads, K head size, V head size) of a sliding or full layer."""
    p = "swa_" if sliding else ""
    return (int(cfg[f"{p}num_attention_heads"]), int(cfg[f"{p}num_key_value_heads"]), int(cfg[f"{p}head_dim"]),
            int(cfg[f"{p}v_head_dim"]))


def mimo_layers(
    cfg: dict[str, Any], n_layers: int, n_heads: int, head_dim: int, where: str
) -> tuple[Layer, ...]:
    window = int(cfg.get("sliding_window") or 0)
    if window <= 0:
        raise ConfigError(f"{where}: sliding_window must be a positive number of tokens for a hybrid MiMo-V2 layout")
    out = []
    for sliding in _flags(cfg, "hybrid_layer_pattern", n_layers, where):
        _, kv, k_dim, _ = _geometry(cfg, bool(sliding))
        # V is padded to the K head size in the cache
        out.append(Layer.of(SlidingWindow(kv, k_dim, k_dim, window_tokens=window) if sliding
                            else FullAttention(kv, k_dim, k_dim)))
    return tuple(out)


def mimo_counts(cfg: dict[str, Any], n_layers: int, hidden: int, n_heads: int, head_dim: int, vocab: int,
                where: str) -> dict[str, int]:
    attention = mlp_dense = experts = experts_active = 0
    n_exp, k = int(cfg.get("n_routed_experts") or 0), int(cfg.get("num_experts_per_tok") or 0)
    expert = 3 * hidden * int(cfg.get("moe_intermediate_size") or 0)
    dense = 3 * hidden * int(cfg["intermediate_size"])
    moe = _flags(cfg, "moe_layer_freq", n_layers, where)
    for sliding, is_moe in zip(_flags(cfg, "hybrid_layer_pattern", n_layers, where), moe):
        heads, kv, k_dim, v_dim = _geometry(cfg, bool(sliding))
        attention += hidden * (heads * k_dim + kv * k_dim + kv * v_dim) + heads * v_dim * hidden
        sink = cfg.get("add_swa_attention_sink_bias") if sliding else cfg.get("add_full_attention_sink_bias")
        attention += heads if sink else 0
        if is_moe and n_exp:
            experts += n_exp * expert
            experts_active += k * expert
            mlp_dense += hidden * n_exp + n_exp  # sigmoid router + score-correction bias (noaux_tc)
        else:
            mlp_dense += dense
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    return dict(embedding=vocab * hidden, lm_head=lm_head, attention=attention, mlp_dense=mlp_dense, experts=experts,
                experts_active=experts_active, norms=(2 * n_layers + 1) * hidden)


FAMILY = Family(
    frozenset({"mimo_v2_flash"}),
    "vllm/model_executor/models/mimo_v2_flash.py", checked="hand",
    layers=mimo_layers,
    counts=mimo_counts,
    read_keys=frozenset(
        {
            "hybrid_layer_pattern",
            "moe_layer_freq",
            "swa_num_attention_heads",
            "swa_num_key_value_heads",
            "swa_head_dim",
            "swa_v_head_dim",
            "sliding_window_size",
        }
    ),
)
