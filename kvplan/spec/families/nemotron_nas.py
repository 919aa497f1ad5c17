"""Nemotron-NAS (`model_type: nemotron-nas`, DeciLMForCausalLM: Llama-3.3-Nemotron-Super-49B,
Llama-3.1-Nemotron-Ultra-253B): a Llama decoder pruned block by block, as vLLM nemotron_nas.py
builds it from `block_configs`, one entry per layer:

    attention.no_op            no attention, no KV cache, no input norm
    attention.replace_with_linear  one hidden x hidden linear instead, no KV cache
    attention.n_heads_in_group     KV heads = num_attention_heads // n_heads_in_group
    ffn.no_op / replace_with_linear / ffn_mult
        intermediate = int(2 x ffn_mult x hidden / 3) rounded up to a multiple of 256
        (vLLM `_ffn_mult_to_intermediate_size`), a gated MLP (gate, up, down)

Checked on Llama-3.3-Nemotron-Super-49B-v1: 49 attention blocks x 8 KV heads x 128 x 2 (K, V) x
2 B = 200,704 B per token, 49.87 B parameters.
"""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache import FullAttention, SlidingWindow
from kvplan.spec.config_section import section
from kvplan.spec.families.family import Family
from kvplan.spec.layer import Layer


def _blocks(cfg: dict[str, Any], n_layers: int, where: str) -> list[dict[str, Any]]:
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != n_layers or not all(isinstance(b, dict) for b in blocks):
        raise ConfigError(f"{where}: block_configs must be a list of {n_layers} objects (one per layer)")
    return blocks


def _attention_of(block: dict[str, Any]) -> dict[str, Any]:
    return section(block, "attention")


def _ffn_of(block: dict[str, Any]) -> dict[str, Any]:
    return section(block, "ffn")


def _kv_heads(att: dict[str, Any], n_heads: int, where: str) -> int:
    group = att.get("n_heads_in_group")
    if not isinstance(group, int) or isinstance(group, bool) or group <= 0 or n_heads % group:
        raise ConfigError(
            f"{where}: block_configs attention.n_heads_in_group must divide num_attention_heads={n_heads}, "
            f"got {group!r}"
        )
    return n_heads // group


def nas_layers(
    cfg: dict[str, Any], n_layers: int, n_heads: int, head_dim: int, where: str
) -> tuple[Layer, ...]:
    out = []
    for block in _blocks(cfg, n_layers, where):
        att = _attention_of(block)
        if att.get("no_op") or att.get("replace_with_linear"):
            out.append(Layer.mlp_only())
            continue
        kv = _kv_heads(att, n_heads, where)
        window = att.get("window_length")
        out.append(Layer.of(SlidingWindow(kv, head_dim, head_dim, window_tokens=int(window)) if window
                            else FullAttention(kv, head_dim, head_dim)))
    return tuple(out)


def ffn_intermediate(ffn_mult: float, hidden: int) -> int:
    """vLLM nemotron_nas.py `_ffn_mult_to_intermediate_size`."""
    size = int(2 * ffn_mult * hidden / 3)
    return size + (-size) % 256


def nas_counts(cfg: dict[str, Any], n_layers: int, hidden: int, n_heads: int, head_dim: int, vocab: int,
               where: str) -> dict[str, int]:
    """ParamCount fields: per-block attention and MLP widths; a norm before each block that exists."""
    attention = mlp = norms = 0
    for block in _blocks(cfg, n_layers, where):
        att, ffn = _attention_of(block), _ffn_of(block)
        if att.get("replace_with_linear"):
            attention += hidden * hidden
        elif not att.get("no_op"):
            kv = _kv_heads(att, n_heads, where)
            attention += hidden * n_heads * head_dim * 2 + 2 * hidden * kv * head_dim
        if ffn.get("replace_with_linear"):
            mlp += hidden * hidden
        elif not ffn.get("no_op"):
            mult = ffn.get("ffn_mult")
            if not isinstance(mult, (int, float)) or isinstance(mult, bool) or mult <= 0:
                raise ConfigError(f"{where}: block_configs ffn.ffn_mult must be a positive number, got {mult!r}")
            mlp += 3 * hidden * ffn_intermediate(float(mult), hidden)
        norms += hidden * ((not att.get("no_op")) + (not ffn.get("no_op")))
    embedding = vocab * hidden
    lm_head = 0 if cfg.get("tie_word_embeddings") else vocab * hidden
    return dict(embedding=embedding, lm_head=lm_head, attention=attention, mlp_dense=mlp, experts=0,
                experts_active=0, norms=norms + hidden)


FAMILY = Family(
    frozenset({"nemotron-nas"}),
    "vllm/model_executor/models/nemotron_nas.py",
    checked="hand",
    layers=nas_layers,
    counts=nas_counts,
    read_keys=frozenset({"block_configs"}),
)
