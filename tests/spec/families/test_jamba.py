"""Jamba: attention where i % attn_layer_period == attn_layer_offset, Mamba v1 elsewhere; experts where
i % expert_layer_period == expert_layer_offset; the Mamba mixer's dt/B/C norms."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("jamba")


def test_layout_by_period_and_offset() -> None:
    s = spec("jamba", attn_layer_period=2, attn_layer_offset=1, num_experts=4, num_experts_per_tok=2,
             expert_layer_period=2, expert_layer_offset=0, mamba_d_state=16, mamba_d_conv=4)
    assert [layer.label for layer in s.layers] == ["mamba1", "full", "mamba1", "full"]
    assert s.params.experts == 2 * 4 * 3 * 64 * 96  # MoE on layers 0 and 2
