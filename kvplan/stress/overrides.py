"""`model.overrides` in a scenario: config.json keys merged over the model's, checked first.

An override may change a key the model's config has (same JSON type; sizes stay positive) or set
one of the architecture keys the planner reads; values are scalars, short lists or small
mappings. Anything else (an unknown key, a document-sized value) is a one-line error naming it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvplan.validation import FieldIssue, short_repr

# keys the planner and the engine read that a config may lack (class defaults)
KNOWN_KEYS = frozenset({
    "head_dim", "num_key_value_heads", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
    "sliding_window_pattern", "max_position_embeddings", "num_hidden_layers", "hidden_size", "intermediate_size",
    "num_attention_heads", "vocab_size", "rope_theta", "rope_scaling", "tie_word_embeddings", "torch_dtype",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "attention_chunk_size",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "attention_bias",
})
# sizes: positive whole numbers within reason
SIZE_KEYS = frozenset({
    "head_dim", "num_key_value_heads", "sliding_window", "max_position_embeddings", "num_hidden_layers", "hidden_size",
    "intermediate_size", "num_attention_heads", "vocab_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "attention_chunk_size", "num_local_experts", "num_experts",
    "num_experts_per_tok", "moe_intermediate_size",
})
MAX_SIZE = 10**8
MAX_LIST_ITEMS = 1024
MAX_MAPPING_ITEMS = 32
_SCALARS = (bool, int, float, str, type(None))


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "mapping", type(None): "null"}.get(type(value), type(value).__name__)


def _check_shape(key: str, value: Any) -> None:
    if isinstance(value, str) and len(value) > 256:
        raise FieldIssue((key,), f"a string of {len(value):,} characters; at most 256")
    if isinstance(value, list):
        if len(value) > MAX_LIST_ITEMS or not all(isinstance(v, _SCALARS) for v in value):
            raise FieldIssue((key,), f"must be a list of at most {MAX_LIST_ITEMS} scalars, got {short_repr(value)}")
    elif isinstance(value, dict):
        if len(value) > MAX_MAPPING_ITEMS or not all(isinstance(v, _SCALARS) for v in value.values()):
            raise FieldIssue(
                (key,), f"must be a mapping of at most {MAX_MAPPING_ITEMS} scalars, got {short_repr(value)}"
            )
    elif not isinstance(value, _SCALARS):
        raise FieldIssue((key,), f"must be a scalar, a list or a mapping, got {short_repr(value)}")


def check_overrides(overrides: Mapping[str, Any], base: Mapping[str, Any], model: str) -> None:
    """Raise `FieldIssue` (path below `model.overrides`) for the first override that cannot apply."""
    for key, value in overrides.items():
        if key not in base and key not in KNOWN_KEYS:
            raise FieldIssue(
                (key,), f"{model}'s config has no key {key!r} and it is not an architecture key kvplan reads"
            )
        _check_shape(key, value)
        if key in SIZE_KEYS and value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
                raise FieldIssue((key,), f"must be a whole number in 1..{MAX_SIZE:,}, got {short_repr(value)}")
        old = base.get(key)
        if old is not None and value is not None and _kind(old) != _kind(value):
            raise FieldIssue(
                (key,), f"must be a {_kind(old)} like the model's {short_repr(old)}, got {short_repr(value)}"
            )
