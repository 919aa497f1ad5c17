"""A decoder's core dimensions from a config.json: layers, hidden size, attention heads, KV heads and
head size, under the key names older architectures use (GPT-2's `n_layer`, Falcon's `n_head_kv`, ...).
The generic rules; a family module may replace the attention geometry (`Family.geometry`)."""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.families.family import Geometry

# Key aliases used by older architectures (GPT-2, Falcon, OPT, ...).
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"),
}


def get(cfg: dict[str, Any], key: str, default: Any = None) -> Any:
    """The first alias of `key` the config sets."""
    for alias in KEY_ALIASES.get(key, (key,)):
        if cfg.get(alias) is not None:
            return cfg[alias]
    return default


def require_int(cfg: dict[str, Any], key: str, where: str) -> int:
    value = get(cfg, key)
    if value is None:
        raise ConfigError(f"{where}: missing required field {key!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
        raise ConfigError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
    return int(value)


def kv_heads(cfg: dict[str, Any], n_heads: int, where: str) -> int:
    for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"):
        if cfg.get(key) is not None:
            value = int(cfg[key])
            if value <= 0 or n_heads % value:
                raise ConfigError(f"{where}: {key}={value} must be positive and divide num_attention_heads={n_heads}")
            return value
    if cfg.get("multi_query") is True:
        return 1
    return n_heads  # no KV-head key: multi-head attention (Llama-2-7b/13b, GPT-2, OPT)


def head_dim(cfg: dict[str, Any], hidden: int, n_heads: int, where: str) -> int:
    explicit = cfg.get("head_dim") or cfg.get("attention_head_dim")  # Nemotron-H: attention_head_dim
    if explicit is not None:
        return int(explicit)
    if hidden % n_heads and cfg.get("kv_lora_rank") and cfg.get("qk_nope_head_dim") and cfg.get("qk_rope_head_dim"):
        # MLA caches a latent; a head is qk_nope + qk_rope wide whatever hidden / heads is (Kimi-K3: 7168 / 96)
        return int(cfg["qk_nope_head_dim"]) + int(cfg["qk_rope_head_dim"])
    if hidden % n_heads:
        raise ConfigError(
            f"{where}: hidden_size={hidden} is not divisible by num_attention_heads={n_heads} and no head_dim is given"
        )
    return hidden // n_heads


def attention_geometry(cfg: dict[str, Any], hidden: int, where: str) -> Geometry:
    """Heads, KV heads (a missing key means multi-head) and head size (an explicit `head_dim` wins
    over hidden / heads)."""
    n_heads = require_int(cfg, "num_attention_heads", where)
    return Geometry(n_heads, kv_heads(cfg, n_heads, where), head_dim(cfg, hidden, n_heads, where))
