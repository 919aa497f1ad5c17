"""MiniMax-Text-01 / M1 (`minimax`, `minimax_text_01`, `minimax_m1`; vLLM minimax_text_01.py): lightning
(linear) attention layers between softmax ones. `attn_type_list` (or `decoder_attention_types`) says
which: 0 linear, 1 softmax; else transformers' `layer_types`; else all softmax. The softmax layers
ignore `sliding_window` (vLLM does not pass it to Attention)."""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.families.family import Family


def minimax_words(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    flags = cfg.get("attn_type_list") or cfg.get("decoder_attention_types")
    if flags:
        if len(flags) != n_layers or set(flags) - {0, 1}:
            raise ConfigError(f"{where}: attn_type_list must hold {n_layers} entries of 0 (linear) or 1 (full)")
        return ["full" if flag == 1 else "linear" for flag in flags]
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        words = {"full_attention": "full", "linear_attention": "linear"}
        if len(types) != n_layers or set(types) - set(words):
            raise ConfigError(
                f"{where}: layer_types must hold {n_layers} entries of full_attention or linear_attention"
            )
        return [words[t] for t in types]
    return ["full"] * n_layers


FAMILY = Family(
    frozenset({"minimax", "minimax_text_01", "minimax_m1"}),
    "vllm/model_executor/models/minimax_text_01.py",
    checked="transformers",
    unchecked=frozenset({"minimax_text_01", "minimax_m1"}),  # transformers builds only `minimax`
    layer_words=minimax_words,
)
