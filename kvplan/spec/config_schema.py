"""The one schema a Hugging Face `config.json` passes before the planner reads it (pydantic).

A config is untrusted input: `head_dim: 0` would plan 0 bytes per token, `-128` negative bytes,
`1.5` would be truncated, 2^70 layers would overflow numpy, and `"architectures": -1` or a string
where a mapping belongs would surface as a TypeError deep in the planner. So every key the
planner reads (`spec.model`, `layers`, `state`, `mixer_params`, `params`, `quant`, `plan.overheads`) is declared
here with its type and range, and a config that breaks one is refused with one line naming the
field path and the bad value. Keys the planner does not read are let through untouched.

Sizes are whole numbers (`128.0` is accepted, as transformers does; `true` and `"128"` are not)
within ranges no real model leaves (10x to 1000x the largest published ones), which keeps every
product the planner forms (bytes per token x context x concurrency) far below 2^53. Validation
only checks: the planner reads the original mapping.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr, ValidationError, create_model

from kvplan.errors import ConfigError
from kvplan.spec.families import MODEL_TYPE
from kvplan.validation import FieldIssue, format_validation_error, short_repr

_LAYERS, _HEADS, _DIM, _WIDTH, _TOKENS = 2**14, 2**14, 2**16, 2**22, 2**31
_LONG_TEXT, _LONG_LIST = 2**14, 2**14  # a per-layer string or list has at most one entry per layer


def _whole_check(low: int, high: int) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"must be a whole number in {low:,}..{high:,}")
        return value

    return check


def _each(check: Callable[[Any], Any], values: list[Any]) -> list[Any]:
    """`check` on every item, naming the bad item's index in the error."""
    out = []
    for i, value in enumerate(values):
        try:
            out.append(check(value))
        except ValueError as exc:
            raise FieldIssue((i,), f"{exc}, got {short_repr(value)}") from None
    return out


def _whole(low: int, high: int) -> Any:
    """A whole number in low..high, or null (absent)."""
    return Annotated[int | None, BeforeValidator(_whole_check(low, high))]


def _number(low: float, high: float) -> Any:
    """A finite number in (low, high], or null."""

    def check(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not low < value <= high:
            raise ValueError(f"must be a finite number in ({low:g}, {high:g}]")
        return value

    return Annotated[float | None, BeforeValidator(check)]


def _whole_or_auto(low: int, high: int) -> Any:
    """Mamba's dt rank: a whole number or "auto" (hidden / 16)."""
    whole = _whole_check(low, high)
    return Annotated[int | str | None, BeforeValidator(lambda v: v if v == "auto" else whole(v))]


def _whole_list(low: int, high: int) -> Any:
    """A list of whole numbers in low..high (layer indexes, per-layer flags), at most one per layer."""
    whole = _whole_check(low, high)

    def check(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list) or len(value) > _LONG_LIST:
            raise ValueError(f"must be a list of at most {_LONG_LIST:,} whole numbers in {low:,}..{high:,}")
        return _each(whole, value)

    return Annotated[list[int | None] | None, BeforeValidator(check)]


def _whole_or_list(low: int, high: int) -> Any:
    """A whole number, or one per layer (Gemma-3n's intermediate_size)."""
    whole = _whole_check(low, high)

    def check(value: Any) -> Any:
        if isinstance(value, list):
            if not value or len(value) > _LONG_LIST:
                raise ValueError(f"must be a whole number in {low:,}..{high:,} or a list of 1..{_LONG_LIST:,} of them")
            return _each(whole, value)
        return whole(value)

    return Annotated[int | list[int] | None, BeforeValidator(check)]


_TEXT = Annotated[StrictStr, Field(max_length=_LONG_TEXT)] | None
_TEXTS = Annotated[list[Annotated[StrictStr, Field(max_length=200)]], Field(max_length=_LONG_LIST)] | None
_FLAG = StrictBool | None

# key -> type, for every key the planner reads
_FIELDS: dict[str, Any] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers"), _whole(1, _LAYERS)),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "dim"), _whole(1, _WIDTH)),
    **dict.fromkeys(
        (
            "num_attention_heads",
            "n_head",
            "num_heads",
            "n_heads",
            "num_key_value_heads",
            "num_kv_heads",
            "n_head_kv",
            "multi_query_group_num",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "mamba_n_heads",
            "mamba_num_heads",
            "n_groups",
            "mamba_n_groups",
            "n_mamba_heads",
            "mamba_ngroups",
            "linear_num_heads",
            "index_n_heads",
        ),
        _whole(1, _HEADS),
    ),
    **dict.fromkeys(
        (
            "head_dim",
            "attention_head_dim",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "q_lora_rank",
            "qk_nope_head_dim",
            "v_head_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "mamba_d_head",
            "mamba_head_dim",
            "ssm_state_size",
            "state_size",
            "mamba_d_state",
            "d_state",
            "conv_kernel",
            "mamba_d_conv",
            "d_conv",
            "linear_conv_kernel_dim",
            "conv_L_cache",
            "mamba_headdim",
            "linear_head_dim",
            "index_head_dim",
        ),
        _whole(1, _DIM),
    ),
    "intermediate_size": _whole_or_list(1, _WIDTH * 16),
    # 0: no shared expert (Qwen3-Coder-480B's config writes it so; vLLM qwen3_moe.py builds none)
    **dict.fromkeys(
        ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", "moe_latent_size"),
        _whole(0, _WIDTH * 16),
    ),  # moe_latent_size 0/absent: experts work at hidden_size
    **dict.fromkeys(
        (
            "ffn_dim",
            "n_inner",
            "ffn_hidden_size",
            "moe_intermediate_size",
            "intermediate_size_mlp",
            "mamba_d_ssm",
            "vocab_size",
            "conv_dim",
            "block_multiple_of",
            "expert_ffn_hidden_size",
        ),
        _whole(1, _WIDTH * 16),
    ),
    **dict.fromkeys(
        ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "attention_chunk_size"),
        _whole(1, _TOKENS),
    ),
    "sliding_window": _whole(0, _TOKENS),  # 0: no window in some configs
    **dict.fromkeys(
        (
            "num_local_experts",
            "num_experts",
            "num_experts_per_tok",
            "n_routed_experts",
            "n_shared_experts",
            "experts_per_token",
            "moe_topk",
            "num_experts_per_token",
            "num_shared_experts",
            "moe_num_experts",
            "moe_k",
            "moe_num_shared_experts",
            "zero_expert_num",
            "top_k_experts",
        ),
        _whole(0, 2**16),
    ),
    **dict.fromkeys(
        (
            "first_k_dense_replace",
            "max_window_layers",
            "num_kv_shared_layers",
            "attn_layer_offset",
            "expert_layer_offset",
            "num_dense_layers",
            "moe_layer_start_index",
            "moe_layer_end_index",
        ),
        _whole(0, _LAYERS),
    ),
    **dict.fromkeys(("num_mem_blocks", "adapter_rank", "moe_layer_interval"), _whole(1, _WIDTH)),
    **dict.fromkeys(
        (
            "sliding_window_pattern",
            "attn_layer_period",
            "expert_layer_period",
            "full_attention_interval",
            "interleave_moe_layer_step",
            "decoder_sparse_step",
            "no_rope_layer_interval",
        ),
        _whole(1, _LAYERS),
    ),
    **dict.fromkeys(("expand", "mamba_expand"), _number(0, 2**10)),
    "partial_rotary_factor": _number(0, 1),
    "block_ffn_dim_multiplier": _number(0, 2**10),
    **dict.fromkeys(("time_step_rank", "mamba_dt_rank"), _whole_or_auto(1, _WIDTH)),
    **dict.fromkeys(
        (
            "cross_attention_layers",
            "mlp_only_layers",
            "attn_layer_indices",
            "no_rope_layers",
            "full_attn_idxs",
            "attn_type_list",
            "decoder_attention_types",
            "hybrid_layer_ids",
        ),
        _whole_list(0, _LAYERS),
    ),
    **dict.fromkeys(("layer_types", "layers_block_type", "mlp_layer_types"), _TEXTS),
    "architectures": _TEXTS,
    **dict.fromkeys(
        (
            "hybrid_override_pattern",
            MODEL_TYPE,
            "torch_dtype",
            "dtype",
            "mamba_ssm_dtype",
            "mamba_ssm_cache_dtype",
            "topk_method",
        ),
        _TEXT,
    ),
    **dict.fromkeys(
        (
            "tie_word_embeddings",
            "attention_bias",
            "multi_query",
            "new_decoder_architecture",
            "use_sliding_window",
            "mamba_conv_bias",
            "mamba_proj_bias",
            "use_bias",
            "use_conv_bias",
            "attn_output_gate",
            "bias",
            "conv_bias",
            "use_qk_norm",
            "block_auto_adjust_ff_dim",
            "add_bias_linear",
            "use_shared_attention_adapter",
        ),
        _FLAG,
    ),
}
_OPEN = ConfigDict(extra="allow", protected_namespaces=())  # keys the planner does not read pass untouched


class QuantWeights(BaseModel):
    """compressed-tensors: `config_groups.<group>.weights`."""

    model_config = _OPEN
    num_bits: _whole(1, 64) = None  # type: ignore[valid-type]
    group_size: _whole(-1, 2**20) = None  # type: ignore[valid-type]
    type: _TEXT = None


class QuantGroup(BaseModel):
    model_config = _OPEN
    weights: QuantWeights | None = None


class QuantConfig(BaseModel):
    """`quantization_config` (GPTQ, AWQ, compressed-tensors, FP8, MXFP4, bitsandbytes)."""

    model_config = _OPEN
    quant_method: _TEXT = None
    bits: _whole(1, 64) = None  # type: ignore[valid-type]
    w_bit: _whole(1, 64) = None  # type: ignore[valid-type]
    group_size: _whole(-1, 2**20) = None  # type: ignore[valid-type]  # -1: one group per channel
    q_group_size: _whole(-1, 2**20) = None  # type: ignore[valid-type]
    config_groups: dict[str, QuantGroup] | None = None


class VisionConfig(BaseModel):
    """What the planner reads of `vision_config` (Mllama's cross-attention encoder length)."""

    model_config = _OPEN
    image_size: _whole_or_list(1, 2**16) = None  # type: ignore[valid-type]
    patch_size: _whole_or_list(1, 2**16) = None  # type: ignore[valid-type]
    max_num_tiles: _whole(1, 2**10) = None  # type: ignore[valid-type]


class RopeScaling(BaseModel):
    """What the planner reads of `rope_scaling` (the rotary cache vLLM sizes for YaRN and friends)."""

    model_config = _OPEN
    rope_type: _TEXT = None
    type: _TEXT = None
    original_max_position_embeddings: _whole(1, _TOKENS) = None  # type: ignore[valid-type]
    factor: _number(0, 2**10) = None  # type: ignore[valid-type]


class DbrxAttnConfig(BaseModel):
    """DBRX's `attn_config` (its KV heads)."""

    model_config = _OPEN
    kv_n_heads: _whole(1, _HEADS) = None  # type: ignore[valid-type]


class DbrxFfnConfig(BaseModel):
    """DBRX's `ffn_config` (its experts)."""

    model_config = _OPEN
    ffn_hidden_size: _whole(1, _WIDTH * 16) = None  # type: ignore[valid-type]
    moe_num_experts: _whole(0, 2**16) = None  # type: ignore[valid-type]
    moe_top_k: _whole(0, 2**16) = None  # type: ignore[valid-type]


class LayerOverride(BaseModel):
    """One entry of transformers 5's `per_layer_config` (Gemma 4: a full layer's head geometry)."""

    model_config = _OPEN
    head_dim: _whole(1, _DIM) = None  # type: ignore[valid-type]
    num_key_value_heads: _whole(1, _HEADS) = None  # type: ignore[valid-type]


class LinearAttnConfig(BaseModel):
    """Kimi-Linear's `linear_attn_config` (its KDA layers, 1-based, and their head geometry)."""

    model_config = _OPEN
    num_heads: _whole(1, _HEADS) = None  # type: ignore[valid-type]
    head_dim: _whole(1, _DIM) = None  # type: ignore[valid-type]
    short_conv_kernel_size: _whole(1, _DIM) = None  # type: ignore[valid-type]
    kda_layers: _whole_list(1, _LAYERS) = None  # type: ignore[valid-type]
    full_attn_layers: _whole_list(1, _LAYERS) = None  # type: ignore[valid-type]


SCHEMA_KEYS = frozenset(_FIELDS)  # every config key the schema checks (and the planner reads)
_Keys = create_model("_Keys", __config__=_OPEN, **{k: (t, None) for k, t in _FIELDS.items()})  # type: ignore[call-overload]


class HfConfig(_Keys):
    """A config.json as far as the planner reads it; the decoder's own config may be nested."""

    text_config: HfConfig | None = None
    llm_config: HfConfig | None = None
    language_config: HfConfig | None = None
    vision_config: VisionConfig | None = None
    quantization_config: QuantConfig | None = None
    rope_scaling: RopeScaling | None = None
    linear_attn_config: LinearAttnConfig | None = None
    attn_config: DbrxAttnConfig | None = None
    per_layer_config: dict[str, LayerOverride] | None = None
    ffn_config: DbrxFfnConfig | None = None


HfConfig.model_rebuild()


def check_config(config: Any, where: str) -> None:
    """Raise `ConfigError` (one line: file, field path, bad value) unless `config` passes the schema."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: a config must be a JSON object, got {type(config).__name__}")
    try:
        HfConfig.model_validate(config)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(where, exc, HfConfig)) from None


def positive_int(cfg: dict[str, Any], key: str, default: int) -> int:
    """A positive integer key of an already-checked config, else `default` (absent, null, 0)."""
    value = cfg.get(key)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
