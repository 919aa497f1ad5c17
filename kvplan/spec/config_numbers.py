"""The numeric fields of a config.json the planner reads, checked before any arithmetic.

A config is untrusted input: `head_dim: 0` would plan 0 bytes per token, `-128` negative bytes,
`1.5` would be truncated, and 2^70 layers would overflow numpy. Each size must be a whole number
(`128.0` is accepted as 128, as transformers does) within a range no real model leaves; `null`
means "absent". The limits are generous (10x to 1000x the largest published models) and keep every
product the planner forms (bytes per token x context x concurrency) far below 2^63.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvplan.errors import ConfigError
from kvplan.validation import short_repr

_LAYERS, _HEADS, _DIM, _WIDTH, _TOKENS = 2**14, 2**14, 2**16, 2**22, 2**31
# key -> (smallest, largest); sliding-window keys may be 0 ("no window" in some configs)
SIZE_LIMITS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers"), (1, _LAYERS)),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "dim"), (1, _WIDTH)),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "n_heads"), (1, _HEADS)),
    **dict.fromkeys(("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"), (1, _HEADS)),
    **dict.fromkeys(("head_dim", "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank", "qk_nope_head_dim", "v_head_dim"),
                    (1, _DIM)),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", "moe_intermediate_size"), (1, _WIDTH * 16)),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"), (1, _TOKENS)),
    "vocab_size": (1, _WIDTH * 16),
    "sliding_window": (0, _TOKENS),
    "max_window_layers": (0, _LAYERS),
    "sliding_window_pattern": (1, _LAYERS),
    **dict.fromkeys(("num_local_experts", "num_experts", "num_experts_per_tok"), (0, 2**16)),
}


def _whole(value: Any) -> int | None:
    """`value` as an int when it is a whole number (int or integral float), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def check_config_numbers(cfg: Mapping[str, Any], where: str) -> None:
    """Raise `ConfigError` naming the first size field of `cfg` that is not a whole number in its range."""
    for key, (low, high) in SIZE_LIMITS.items():
        value = cfg.get(key)
        if value is None:
            continue
        number = _whole(value)
        if number is None or not low <= number <= high:
            raise ConfigError(f"{where}: {key} must be a whole number in {low:,}..{high:,}, got {short_repr(value)}")
