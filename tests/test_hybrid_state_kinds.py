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
