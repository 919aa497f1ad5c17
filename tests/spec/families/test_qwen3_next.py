"""Qwen3-Next / Qwen3.5: the full layers' q_proj also emits the output gate (h x H d more) unless
`attn_output_gate` is false; Gated-DeltaNet layers between them."""
from __future__ import annotations

from family_oracle import assert_exact, spec

GDN = {"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
       "full_attention_interval": 2}


def test_matches_transformers() -> None:
    assert_exact("qwen3_next")
    assert_exact("qwen3_5_text")


def test_output_gate_and_layer_pattern() -> None:
    gated, plain = spec("qwen3_next", **GDN), spec("qwen3_next", attn_output_gate=False, **GDN)
    assert [layer.label for layer in gated.layers] == ["gdn", "full", "gdn", "full"]
    assert gated.params.attention - plain.params.attention == 2 * 64 * 64  # two full layers, h x (4 x 16)
