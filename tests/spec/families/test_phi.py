"""Phi-2: one biased LayerNorm per layer (attention and MLP in parallel) and a biased LM head."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("phi")


def test_one_norm_per_layer_and_a_head_bias() -> None:
    p = spec("phi").params
    assert p.norms == 4 * 2 * 64 + 2 * 64  # one LayerNorm (weight + bias) per layer, and the final one
    assert p.lm_head == 320 * 64 + 320
