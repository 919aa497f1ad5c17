"""Recurrent-state layers from a config: the `RecurrentState` (kvplan.spec.cache.state) of each mixer
kind, with the keys each family names its dimensions by."""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache.state import RecurrentState
from kvplan.spec.dtypes import normalize_model_dtype


# --- from a config ----------------------------------------------------------------------------------
def _int(cfg: dict[str, Any], where: str, *keys: str, default: int | None = None) -> int:
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


def _ssm_dtype(cfg: dict[str, Any], model_type: str, where: str) -> str | None:
    """The SSM-state dtype the checkpoint asks vLLM for (None: the model dtype)."""
    raw = cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype")
    if raw is None and model_type == "nemotron_h":
        raw = "float16"  # vLLM's NemotronHForCausalLMConfig default when the config has none
    if raw is None or str(raw) == "auto":
        return None
    try:
        return normalize_model_dtype(str(raw))
    except Exception:  # noqa: BLE001 - a config value, reported as one line
        raise ConfigError(f"{where}: unknown mamba SSM dtype {raw!r}") from None


def gated_delta_net_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """Qwen3-Next / Qwen3.5 `linear_attention` layers (vLLM qwen3_next.py / qwen3_5.py)."""
    nk = _int(cfg, where, "linear_num_key_heads")
    nv = _int(cfg, where, "linear_num_value_heads")
    dk = _int(cfg, where, "linear_key_head_dim")
    dv = _int(cfg, where, "linear_value_head_dim")
    k = _int(cfg, where, "linear_conv_kernel_dim", default=4)
    return RecurrentState("gdn", 2 * nk * dk + nv * dv, k, nv, dv, dk,
                          ssm_dtype=_ssm_dtype(cfg, str(cfg.get("model_type", "")), where))


def mamba2_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """Mamba2 mixers: Granite-4.0-H / Bamba / Falcon-H1 (`mamba_*` keys), Nemotron-H and pure
    Mamba2 (`mamba_num_heads`/`num_heads`, `n_groups`, `ssm_state_size`/`state_size`, `conv_kernel`)."""
    model_type = str(cfg.get("model_type", ""))
    hidden = _int(cfg, where, "hidden_size", "d_model")
    if model_type == "zamba2":
        return _zamba2_mamba(cfg, hidden, where)
    heads = _int(cfg, where, "mamba_n_heads", "mamba_num_heads", "num_heads")
    head_dim = _int(cfg, where, "mamba_d_head", "mamba_head_dim", "head_dim")
    if model_type == "nemotron_h":
        inner = heads * head_dim  # vLLM nemotron_h.py: intermediate = mamba_num_heads x mamba_head_dim
    else:
        expand = cfg.get("mamba_expand") or cfg.get("expand") or 2
        inner = _int(cfg, where, "mamba_d_ssm", default=int(expand * hidden))  # Falcon-H1 may set d_ssm
    return RecurrentState(
        "mamba2", inner, _int(cfg, where, "mamba_d_conv", "conv_kernel", default=4), heads, head_dim,
        _int(cfg, where, "mamba_d_state", "ssm_state_size", "state_size", default=128),
        groups=_int(cfg, where, "mamba_n_groups", "n_groups", default=1), ssm_dtype=_ssm_dtype(cfg, model_type, where))


def kda_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """Kimi-Linear KDA layers (vLLM kimi_linear.py `kda_state_shape`, `kda_state_dtype`): q, k and v conv
    states of H x d channels in the model dtype and a (H/tp, d, d) recurrent state in float32. Keys from the
    checkpoint's `linear_attn_config` (num_heads, head_dim, short_conv_kernel_size) or transformers' names."""
    lin = cfg.get("linear_attn_config") if isinstance(cfg.get("linear_attn_config"), dict) else {}
    merged = {"linear_num_heads": lin.get("num_heads"), "linear_head_dim": lin.get("head_dim"),
              "linear_conv_kernel_dim": lin.get("short_conv_kernel_size")}
    merged = {k: v if v is not None else cfg.get(k) for k, v in merged.items()}
    heads = _int(merged, where, "linear_num_heads")
    head_dim = _int(merged, where, "linear_head_dim")
    return RecurrentState("kda", 3 * heads * head_dim, _int(merged, where, "linear_conv_kernel_dim", default=4), heads,
                          head_dim, head_dim, ssm_dtype="float32")


def linear_attention_state(cfg: dict[str, Any], head_dim: int, where: str) -> RecurrentState:
    """MiniMax lightning attention (vLLM minimax_text_01.py `linear_attention_state_shape`): one
    (heads/tp, d, d) state per layer in the model dtype (`--mamba-ssm-cache-dtype` does not apply), no conv."""
    heads = _int(cfg, where, "num_attention_heads")
    return RecurrentState("linear", 0, 1, heads, head_dim, head_dim)


def short_conv_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """LFM2 `conv` layers (vLLM lfm2.py `short_conv_state_shape(intermediate_size=conv_dim,
    conv_kernel=conv_L_cache)`): a conv state of (conv_L_cache - 1) x conv_dim, no SSM state."""
    hidden = _int(cfg, where, "hidden_size")
    channels = _int(cfg, where, "conv_dim", default=hidden)  # transformers' Lfm2Config convolves the hidden width
    return RecurrentState("short_conv", channels, _int(cfg, where, "conv_L_cache", default=3), channels, 1, 0)


def _zamba2_mamba(cfg: dict[str, Any], hidden: int, where: str) -> RecurrentState:
    """Zamba2's mixer (vLLM zamba2.py): I = mamba_expand x hidden, n_mamba_heads heads of I / heads,
    mamba_ngroups groups (transformers' Zamba2Config defaults: expand 2, 8 heads, 1 group, d_state 64, d_conv 4)."""
    inner = int(float(cfg.get("mamba_expand") or 2) * hidden)
    heads = _int(cfg, where, "n_mamba_heads", default=8)
    if inner % heads:
        raise ConfigError(f"{where}: mamba_expand x hidden_size = {inner} is not divisible by n_mamba_heads={heads}")
    return RecurrentState(
        "mamba2",
        inner,
        _int(cfg, where, "mamba_d_conv", default=4),
        heads,
        _int(cfg, where, "mamba_headdim", default=inner // heads),
        _int(cfg, where, "mamba_d_state", default=64),
        groups=_int(cfg, where, "mamba_ngroups", default=1),
        ssm_dtype=_ssm_dtype(cfg, "zamba2", where),
    )


def mamba1_state(cfg: dict[str, Any], where: str) -> RecurrentState:
    """Mamba v1 mixers: Jamba (`mamba_expand` x hidden, `mamba_d_state`, `mamba_d_conv`) and
    Mamba / Falcon-Mamba (`intermediate_size`, `state_size`, `conv_kernel`)."""
    if str(cfg.get("model_type", "")) == "jamba":
        hidden = _int(cfg, where, "hidden_size")
        inner = int(float(cfg.get("mamba_expand") or 2) * hidden)
        n, k = _int(cfg, where, "mamba_d_state", default=16), _int(cfg, where, "mamba_d_conv", default=4)
    else:
        hidden = _int(cfg, where, "hidden_size", "d_model")
        inner = _int(cfg, where, "intermediate_size", default=int(float(cfg.get("expand") or 2) * hidden))
        n, k = (
            _int(cfg, where, "state_size", "d_state", default=16),
            _int(cfg, where, "conv_kernel", "d_conv", default=4),
        )
    return RecurrentState("mamba1", inner, k, inner, 1, n, ssm_dtype=_ssm_dtype(cfg, "", where))
