"""LongCat-Flash (`longcat_flash`, Meituan): each decoder layer runs two MLA attentions and two dense MLPs
around one mixture of experts whose router also picks "zero" experts (identity, no weights). vLLM
longcat_flash.py builds the two attentions as separate modules (`self_attn.0`, `self_attn.1`), each with
its own KV cache, so kvplan plans 2 x num_layers MLA cache layers.

Parameters, as transformers' modeling_longcat_flash.py builds them (h: hidden, per decoder layer):
two MLA attentions (q_lora_rank down/up with its norm, kv_a with its norm, kv_b, o), two gated MLPs
h x ffn_hidden_size, n_routed_experts experts (gate_up h x 2 I_e, down I_e x h), a router over
n_routed_experts + zero_expert_num, four norms; embedding, LM head, a final norm.
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.families.family import Family
from kvplan.spec.layer import Layer
from kvplan.spec.layers import mla_layers
from kvplan.spec.params import attention_params

ATTENTIONS_PER_LAYER = 2


def longcat_layers(cfg: dict[str, Any], n_layers: int, n_heads: int, head_dim: int, where: str) -> tuple[Layer, ...]:
    return mla_layers(cfg, ATTENTIONS_PER_LAYER * n_layers, where)


def longcat_counts(cfg: dict[str, Any], cache_layers: int, hidden: int, n_heads: int, head_dim: int, vocab: int,
                   where: str) -> dict[str, int]:
    """ParamCount's fields; `cache_layers` is 2 x num_layers."""
    mla_params = attention_params(cfg, hidden, n_heads, n_heads, head_dim)
    layers = cache_layers // ATTENTIONS_PER_LAYER
    ffn, expert_ffn = int(cfg.get("ffn_hidden_size") or 4 * hidden), int(cfg.get("expert_ffn_hidden_size") or hidden)
    n_exp, zero, top_k = (int(cfg.get("n_routed_experts") or 0), int(cfg.get("zero_expert_num") or 0),
                          int(cfg.get("moe_topk") or 0))
    expert = 3 * hidden * expert_ffn
    mlp = layers * (ATTENTIONS_PER_LAYER * 3 * hidden * ffn + (n_exp + zero) * hidden)
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    return dict(embedding=vocab * hidden, lm_head=lm_head, attention=cache_layers * mla_params,
                mlp_dense=mlp, experts=layers * n_exp * expert, experts_active=layers * top_k * expert,
                norms=layers * 4 * hidden + hidden)


FAMILY = Family(frozenset({"longcat_flash"}), "vllm/model_executor/models/longcat_flash.py", checked="transformers",
                layers=longcat_layers, counts=longcat_counts)
