"""Mamba / Falcon-Mamba: attention-free, one Mamba v1 mixer and one norm per layer, a tied head."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("mamba")
    assert_exact("falcon_mamba")


def test_attention_free() -> None:
    s = spec("mamba", num_attention_heads=None, num_key_value_heads=None, state_size=16, conv_kernel=4)
    assert s.num_attention_heads == 0 and {layer.label for layer in s.layers} == {"mamba1"}
    assert s.params.lm_head == 0 and s.params.norms == 5 * 64
