"""Gemma 2: sliding window on even layers (transformers `is_sliding = not bool(layer_idx % 2)`), four
norms per layer, head_dim 256 by default."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("gemma2")


def test_even_layers_slide() -> None:
    s = spec("gemma2", sliding_window=1024, max_position_embeddings=8192)
    assert [layer.kind for layer in s.layers] == ["sliding", "full", "sliding", "full"]
    assert s.params.norms == 4 * 4 * 64 + 64


def test_head_dim_default() -> None:
    assert spec("gemma2", head_dim=None, hidden_size=512, num_attention_heads=8).head_dim == 256
