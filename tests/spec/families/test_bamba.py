"""Bamba: attention at attn_layer_indices, Mamba2 elsewhere."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("bamba")


def test_attention_at_its_indices() -> None:
    s = spec("bamba", attn_layer_indices=[1], mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_n_groups=1)
    assert [layer.label for layer in s.layers] == ["mamba2", "full", "mamba2", "mamba2"]
