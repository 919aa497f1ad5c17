"""State kinds beyond Mamba and Gated-DeltaNet: LFM2 short convolution, MiniMax lightning
(linear) attention, Zamba2's shared-attention hybrid layers and Kimi-Linear's KDA layers.

Each expectation is counted by hand from a transformers config (AutoConfig.for_model, no
download) and the vLLM file that sizes it:
- vllm/model_executor/layers/mamba/mamba_utils.py: MambaStateShapeCalculator.short_conv_state_shape,
  linear_attention_state_shape, kda_state_shape; MambaStateDtypeCalculator (short conv and linear
  attention in the model dtype; KDA conv in the model dtype, recurrent state float32)
- vllm/model_executor/models/lfm2.py: `layer_types[i] == "full_attention"` attends, every other
  layer is a ShortConv of `conv_dim` channels with a (conv_L_cache - 1)-step state
"""
from __future__ import annotations

import pytest

from kvplan.plan.kv import KvLayout
from kvplan.spec.model import spec_from_config

transformers = pytest.importorskip("transformers")


def _lfm2(**kwargs) -> dict:
    base = dict(hidden_size=2048, num_hidden_layers=16, full_attn_idxs=[2, 5, 8, 10, 12, 14], num_attention_heads=32,
                num_key_value_heads=8, vocab_size=65536, intermediate_size=12288, dtype="bfloat16")
    return transformers.AutoConfig.for_model("lfm2", **{**base, **kwargs}).to_dict()


def test_lfm2_short_conv_layers_hold_state_not_kv():
    """LFM2: 6 attention layers cache K/V (head_dim 2048 / 32 = 64); the 10 conv layers hold
    (3 - 1) x 2048 bf16 values each per request, whatever the context."""
    cfg = _lfm2()
    assert cfg["layer_types"].count("conv") == 10  # transformers writes layer_types from full_attn_idxs
    spec = spec_from_config(cfg, "lfm2")
    lay = KvLayout.of(spec)
    assert spec.attention_kinds == {"short_conv": 10, "full": 6}
    assert lay.bytes_per_token() == 2 * 6 * 8 * 64 * 2 == 12_288
    assert lay.state_bytes_per_request() == 10 * (3 - 1) * 2048 * 2 == 81_920
    assert KvLayout.of(spec, tp=2).state_bytes_per_request_per_gpu() == 81_920 // 2  # conv_dim split over TP


def test_lfm2_without_layer_types_reads_full_attn_idxs():
    """Older LFM2 configs carry only `full_attn_idxs`; transformers derives the same layer_types."""
    cfg = _lfm2()
    del cfg["layer_types"]
    assert spec_from_config(cfg, "lfm2").attention_kinds == {"short_conv": 10, "full": 6}


def test_lfm2_parameters_by_module():
    """Weights by hand from the HF modules (transformers modeling_lfm2.py / vLLM lfm2.py):
    conv layer: in_proj h x 3h + depthwise conv h x 3 + out_proj h x h (conv_bias false);
    MLP width int(2/3 x 12288) = 8192 (block_auto_adjust_ff_dim, rounded to 256), gated: 3 x h x 8192;
    attention: q/o 2 x h x h, k/v 2 x h x 512, q/k norms 2 x 64; norms 2 per layer + final; tied head."""
    h = 2048
    p = spec_from_config(_lfm2(), "lfm2").params
    assert p.mixer == 10 * (h * 3 * h + h * 3 + h * h)
    assert p.mlp_dense == 16 * 3 * h * 8192
    assert p.attention == 6 * (2 * h * h + 2 * h * 512 + 2 * 64)
    assert p.norms == 16 * 2 * h + h
    assert p.lm_head == 0 and p.embedding == 65536 * h


# --- MiniMax-Text-01 / M1: lightning attention ----------------------------------------------------
def _minimax(**kwargs) -> dict:
    base = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                vocab_size=1000, intermediate_size=256, num_local_experts=4, num_experts_per_tok=2, dtype="bfloat16")
    return transformers.AutoConfig.for_model("minimax", **{**base, **kwargs}).to_dict()


def test_minimax_lightning_layers_hold_a_d_by_d_state():
    """transformers' MiniMax layer_types alternate full / linear. vLLM minimax_text_01.py: full layers cache
    K/V (2 KV heads x 64); each linear layer holds linear_attention_state_shape (8 heads, 64, 64) in the
    model dtype, no conv state."""
    spec = spec_from_config(_minimax(), "minimax")
    lay = KvLayout.of(spec)
    assert spec.attention_kinds == {"full": 4, "linear": 4}
    assert lay.bytes_per_token() == 2 * 4 * 2 * 64 * 2 == 2_048
    assert lay.state_bytes_per_request() == 4 * 8 * 64 * 64 * 2 == 262_144
    assert KvLayout.of(spec, tp=2).state_bytes_per_request_per_gpu() == 4 * 4 * 64 * 64 * 2  # heads // tp


def test_minimax_text_01_attn_type_list_wins():
    """The checkpoint's `attn_type_list` (0 linear, 1 full) decides, as vLLM reads it before layer_types;
    `sliding_window` is not applied to the softmax layers (vLLM does not pass it to Attention)."""
    cfg = dict(_minimax(), model_type="minimax_text_01", attn_type_list=[0, 0, 0, 1, 0, 0, 0, 1], sliding_window=512)
    spec = spec_from_config(cfg, "minimax-text-01")
    assert spec.attention_kinds == {"linear": 6, "full": 2}
    assert [layer.kind for layer in spec.layers].count("full") == 2 and all(
        layer.window_tokens is None for layer in spec.layers
    )


def test_minimax_bad_attn_type_list_is_one_line():
    from kvplan.errors import ConfigError

    with pytest.raises(ConfigError, match="attn_type_list"):
        spec_from_config(dict(_minimax(), attn_type_list=[0, 2, 1, 1, 1, 1, 1, 1]), "bad")


# --- Zamba2: Mamba2 everywhere, shared attention with a cache per hybrid layer -----------------------
def test_zamba2_hybrid_layers_cache_kv_and_hold_mamba_state():
    """vLLM zamba2.py: every layer (hybrid ones too) runs a Mamba2 mixer; each "hybrid" layer has its own
    Attention (weights shared, KV not) with attention_head_dim = 2 x hidden / heads, multi-head.
    State per layer (mamba2_state_shape): conv (4 - 1, 2 x 512 + 2 x 1 x 64), ssm (8 heads, 1024 / 8, 64)."""
    blocks = ["mamba", "mamba", "hybrid", "mamba", "mamba", "hybrid"]
    cfg = transformers.AutoConfig.for_model("zamba2", hidden_size=512, num_hidden_layers=6, layers_block_type=blocks,
                                            num_attention_heads=8, vocab_size=1000, dtype="bfloat16").to_dict()
    spec = spec_from_config(cfg, "zamba2")
    lay = KvLayout.of(spec)
    assert spec.attention_kinds == {"mamba2": 4, "full+mamba2": 2}
    assert lay.bytes_per_token() == 2 * 2 * 8 * (2 * 512 // 8) * 2 == 8_192
    per_layer = 3 * (1024 + 2 * 64) + 8 * 128 * 64
    assert lay.state_bytes_per_request() == 6 * per_layer * 2


# --- Kimi-Linear: MLA between KDA layers ------------------------------------------------------------
def _kimi_linear() -> dict:
    cfg = transformers.AutoConfig.for_model(
        "kimi_linear",
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=1000,
        num_hidden_layers=8,
        intermediate_size=512,
        moe_intermediate_size=64,
        num_experts=4,
        num_experts_per_token=2,
        kv_lora_rank=128,
        qk_rope_head_dim=32,
        qk_nope_head_dim=64,
        v_head_dim=64,
        linear_num_heads=4,
        linear_head_dim=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        dtype="bfloat16",
    ).to_dict()
    return cfg


def test_kimi_linear_kda_layers_from_the_checkpoint_keys():
    """The checkpoint's linear_attn_config.kda_layers is 1-based (vLLM kimi_linear.py `(layer_idx + 1) in
    kda_layers`); the others are MLA: 128 + 32 latent values per token. KDA state (kda_state_shape /
    kda_state_dtype): q, k, v conv states (4 - 1) x 3 x 4 x 64 bf16 and a (4, 64, 64) float32 state."""
    cfg = {k: v for k, v in _kimi_linear().items() if k != "layer_types"}
    cfg["linear_attn_config"] = {"kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8], "num_heads": 4,
                                 "head_dim": 64, "short_conv_kernel_size": 4}
    spec = spec_from_config(cfg, "kimi-linear")
    lay = KvLayout.of(spec)
    assert [layer.kind for layer in spec.layers] == ["none"] * 3 + ["mla"] + ["none"] * 3 + ["mla"]
    assert lay.bytes_per_token() == 2 * (128 + 32) * 2 == 640
    assert lay.state_bytes_per_request() == 6 * (3 * 3 * 4 * 64 * 2 + 4 * 64 * 64 * 4)


def test_kimi_linear_as_transformers_5_writes_it():
    """transformers 5 writes `layer_types` instead of linear_attn_config: linear_attention layers are KDA."""
    cfg = _kimi_linear()
    full = cfg["layer_types"].count("full_attention")
    assert 0 < full < 8
    spec = spec_from_config(cfg, "kimi-linear")
    assert spec.attention_kinds == {"kda": 8 - full, "mla": full}
    assert KvLayout.of(spec).bytes_per_token() == full * (128 + 32) * 2
