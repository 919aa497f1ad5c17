"""Recurrent-state layers from a config: the `RecurrentState` (kvplan.spec.cache.state) of each mixer
kind, with the keys each family names its dimensions by."""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache.state import RecurrentState
from kvplan.spec.dtypes import normalize_model_dtype


# --- from a config ----------------------------------------------------------------------------------
def config_int(cfg: dict[str, Any], where: str, *keys: str, default: int | None = None) -> int:
    """The first of `keys` the config sets, as a positive integer."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
            raise ConfigError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
        return int(value)
    if default is None:
        raise ConfigError(f"{where}: missing required field {keys[0]!r} for the model's state layers")
    return default


def ssm_dtype(cfg: dict[str, Any], where: str) -> str | None:
    """The SSM-state dtype the checkpoint asks vLLM for (None: the model dtype)."""
    raw = cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype")
    if raw is None or str(raw) == "auto":
        return None
    try:
        return normalize_model_dtype(str(raw))
    except Exception:  # noqa: BLE001 - a config value, reported as one line
        raise ConfigError(f"{where}: unknown mamba SSM dtype {raw!r}") from None


def gated_delta_net_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """Qwen3-Next / Qwen3.5 `linear_attention` layers (vLLM qwen3_next.py / qwen3_5.py)."""
    nk = config_int(cfg, where, "linear_num_key_heads")
    nv = config_int(cfg, where, "linear_num_value_heads")
    dk = config_int(cfg, where, "linear_key_head_dim")
    dv = config_int(cfg, where, "linear_value_head_dim")
    k = config_int(cfg, where, "linear_conv_kernel_dim", default=4)
    return RecurrentState("gdn", 2 * nk * dk + nv * dv, k, nv, dv, dk,
                          ssm_dtype=ssm_dtype(cfg, where))


def mamba2_state(cfg: dict[str, Any], where: str, *, inner: int | None = None) -> RecurrentState:
    """Mamba2 mixers: Granite-4.0-H / Bamba / Falcon-H1 (`mamba_*` keys) and pure Mamba2
    (`num_heads`, `n_groups`, `ssm_state_size`/`state_size`, `conv_kernel`); `inner`: a family's own
    intermediate width (default mamba_d_ssm, else expand x hidden)."""
    hidden = config_int(cfg, where, "hidden_size", "d_model")
    heads = config_int(cfg, where, "mamba_n_heads", "mamba_num_heads", "num_heads")
    head_dim = config_int(cfg, where, "mamba_d_head", "mamba_head_dim", "head_dim")
    if inner is None:
        expand = cfg.get("mamba_expand") or cfg.get("expand") or 2
        inner = config_int(cfg, where, "mamba_d_ssm", default=int(expand * hidden))  # Falcon-H1 may set d_ssm
    return RecurrentState(
        "mamba2", inner, config_int(cfg, where, "mamba_d_conv", "conv_kernel", default=4), heads, head_dim,
        config_int(cfg, where, "mamba_d_state", "ssm_state_size", "state_size", default=128),
        groups=config_int(cfg, where, "mamba_n_groups", "n_groups", default=1), ssm_dtype=ssm_dtype(cfg, where))


def linear_attention_state(cfg: dict[str, Any], head_dim: int, where: str) -> RecurrentState:
    """MiniMax lightning attention (vLLM minimax_text_01.py `linear_attention_state_shape`): one
    (heads/tp, d, d) state per layer in the model dtype (`--mamba-ssm-cache-dtype` does not apply), no conv."""
    heads = config_int(cfg, where, "num_attention_heads")
    return RecurrentState("linear", 0, 1, heads, head_dim, head_dim)


def short_conv_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """LFM2 `conv` layers (vLLM lfm2.py `short_conv_state_shape(intermediate_size=conv_dim,
    conv_kernel=conv_L_cache)`): a conv state of (conv_L_cache - 1) x conv_dim, no SSM state."""
    hidden = config_int(cfg, where, "hidden_size")
    channels = config_int(cfg, where, "conv_dim", default=hidden)  # transformers' Lfm2Config convolves the hidden width
    return RecurrentState("short_conv", channels, config_int(cfg, where, "conv_L_cache", default=3), channels, 1, 0)


def mamba1_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """Mamba v1 mixers: Mamba / Falcon-Mamba (`intermediate_size`, `state_size`, `conv_kernel`)."""
    hidden = config_int(cfg, where, "hidden_size", "d_model")
    inner = config_int(cfg, where, "intermediate_size", default=int(float(cfg.get("expand") or 2) * hidden))
    n = config_int(cfg, where, "state_size", "d_state", default=16)
    k = config_int(cfg, where, "conv_kernel", "d_conv", default=4)
    return RecurrentState("mamba1", inner, k, inner, 1, n, ssm_dtype=ssm_dtype(cfg, where))
