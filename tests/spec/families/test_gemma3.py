"""Gemma 3: every sliding_window_pattern-th layer full (transformers `(layer_idx + 1) % pattern`),
four norms and per-head q/k norms, a second rotary cache for the sliding layers, Gemma3TextConfig's
defaults."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("gemma3_text")


def test_five_sliding_then_one_full() -> None:
    s = spec("gemma3_text", num_hidden_layers=12, sliding_window=512)
    assert [i for i, layer in enumerate(s.layers) if layer.kind == "full"] == [5, 11]
    assert s.local_rope


def test_class_defaults() -> None:
    s = spec("gemma3_text", head_dim=None, vocab_size=None, max_position_embeddings=None)
    assert (s.head_dim, s.vocab_size, s.max_position_embeddings) == (256, 262208, 131072)
