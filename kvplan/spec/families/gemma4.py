"""Gemma 4 (`gemma4`, `gemma4_text`): the full-attention layers' own geometry, the model's parameters and
its vision tower.

KV cache (vLLM gemma4.py `Gemma4DecoderLayer`): sliding layers cache `num_key_value_heads` heads of
`head_dim`; full layers use `global_head_dim` and, with `attention_k_eq_v`, `num_global_key_value_heads`
(a config written by transformers 5.25 carries them as `per_layer_config` overrides instead)
(K and V are both cached: V is K's projection without RoPE, normed apart). Pages differ between the two
types, so vLLM unifies them by block size (kvplan.plan.groups).

Parameters, as transformers' modeling_gemma4.py builds them (h: hidden, H: heads, d: the layer's head
dim, kv: its KV heads, I: intermediate_size, E experts of width I_e, p: hidden_size_per_layer_input):
    attention   q h x H d, k and v h x kv d, o H d x h, q/k norms d each; a k_eq_v full layer has no v_proj
                in the checkpoint, but vLLM's QKVParallelLinear allocates its V slot (filled with K), which
                is what the GPU holds and what is counted
    MLP         gated h x I (2 I on KV-shared layers with use_double_wide_mlp), always; with
                enable_moe_block also E experts (gate_up h x 2 I_e, down I_e x h) and a router
                (proj E x h, scale h, per-expert scale E) beside it, and three more norms
    norms       four per layer (seven with experts), a final one
    per layer   with p > 0: input gate h x p, projection p x h, norm h; per-layer embeddings
                V_pl x L p, their projection h x L p and norm p
    vision      gemma4_vision: patch projection 3 P^2 x h, 2 x position_embedding_size x h positions,
                per layer q/k/v/o, q/k norms, gated MLP and four norms; embedder text h x vision h
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.config_schema import positive_int
from kvplan.spec.families.family import Family
from kvplan.spec.families.tower import Tower
from kvplan.spec.geometry import kv_heads as config_kv_heads


def layer_geometry(cfg: dict[str, Any], index: int, full: bool, kv_heads: int, head_dim: int) -> tuple[int, int]:
    """(KV heads, head dim) of layer `index`: transformers 5's `per_layer_config` overrides ({"05": {"head_dim":
    512, ...}}) when the config carries them, else the global keys on full-attention layers."""
    per_layer = cfg.get("per_layer_config")
    if isinstance(per_layer, dict):
        over = next(
            (v for k, v in per_layer.items() if str(k).isdigit() and int(k) == index and isinstance(v, dict)), {}
        )
        return positive_int(over, "num_key_value_heads", kv_heads), positive_int(over, "head_dim", head_dim)
    if not full:
        return kv_heads, head_dim
    dim = positive_int(cfg, "global_head_dim", head_dim)
    heads = positive_int(cfg, "num_global_key_value_heads", kv_heads) if cfg.get("attention_k_eq_v") else kv_heads
    return heads, dim


def _layer_types(cfg: dict[str, Any], n_layers: int) -> list[str]:
    types = cfg.get("layer_types")
    return (
        [str(t) for t in types]
        if isinstance(types, list) and len(types) == n_layers
        else ["sliding_attention"] * n_layers
    )


def text_counts(cfg: dict[str, Any], n_layers: int, hidden: int, n_heads: int, head_dim: int, vocab: int,
                where: str) -> dict[str, int]:
    """The text model's parameters by where they live (ParamCount's fields)."""
    kv_heads = config_kv_heads(cfg, n_heads, where)
    inter = positive_int(cfg, "intermediate_size", 4 * hidden)
    shared_from = (
        n_layers - positive_int(cfg, "num_kv_shared_layers", 0) if cfg.get("num_kv_shared_layers") else n_layers
    )
    attention = mlp = experts = active = 0
    n_exp, k_exp = positive_int(cfg, "num_experts", 0), positive_int(cfg, "top_k_experts", 0)
    exp_inter = positive_int(cfg, "moe_intermediate_size", 0)
    moe = bool(cfg.get("enable_moe_block")) and n_exp > 0
    for i, kind in enumerate(_layer_types(cfg, n_layers)):
        kv, d = layer_geometry(cfg, i, kind == "full_attention", kv_heads, head_dim)
        attention += hidden * n_heads * d + 2 * hidden * kv * d + n_heads * d * hidden + 2 * d
        width = 2 * inter if cfg.get("use_double_wide_mlp") and i >= shared_from else inter
        mlp += 3 * hidden * width
        if moe:
            experts += n_exp * 3 * hidden * exp_inter
            active += k_exp * 3 * hidden * exp_inter
            mlp += n_exp * hidden + hidden + n_exp  # router proj, scale, per-expert scale
    p = positive_int(cfg, "hidden_size_per_layer_input", 0)
    embedding = vocab * hidden + (positive_int(cfg, "vocab_size_per_layer_input", vocab) * n_layers * p if p else 0)
    if p:
        mlp += n_layers * 2 * hidden * p + hidden * n_layers * p
    norms = n_layers * ((7 if moe else 4) + (1 if p else 0)) * hidden + hidden + p
    lm_head = 0 if cfg.get("tie_word_embeddings", True) else vocab * hidden
    return dict(embedding=embedding, lm_head=lm_head, attention=attention, mlp_dense=mlp, experts=experts,
                experts_active=active, norms=norms)


def vision_params(outer: dict[str, Any], vision: dict[str, Any], text_hidden: int) -> int:
    """A gemma4_vision tower and its embedder."""
    h, heads = positive_int(vision, "hidden_size", 0), positive_int(vision, "num_attention_heads", 16)
    d, kv = positive_int(vision, "head_dim", h // heads), positive_int(vision, "num_key_value_heads", heads)
    inter, layers = positive_int(vision, "intermediate_size", 4 * h), positive_int(vision, "num_hidden_layers", 0)
    patch = positive_int(vision, "patch_size", 16)
    block = h * heads * d + 2 * h * kv * d + heads * d * h + 2 * d + 3 * h * inter + 4 * h
    return (
        3 * patch * patch * h
        + 2 * positive_int(vision, "position_embedding_size", 10240) * h
        + layers * block
        + text_hidden * h
    )


FAMILY = Family(
    frozenset({"gemma4", "gemma4_text"}),
    "vllm/model_executor/models/gemma4.py",
    checked="transformers",
    unchecked=frozenset({"gemma4"}),  # the multimodal wrapper; its text model is checked
    layer_geometry=layer_geometry,
    counts=text_counts,
)
TOWER = Tower("gemma4", vision_types=("gemma4_vision",), params=vision_params)
