"""Llama, Mistral, Mixtral: the generic decoder, exact against transformers; Llama's class defaults
2,048 positions and 32,000 tokens, Mistral's 32,768 positions."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    for t in ("llama", "mistral", "mixtral"):
        assert_exact(t)


def test_class_defaults() -> None:
    s = spec("llama", max_position_embeddings=None, vocab_size=None)
    assert (s.max_position_embeddings, s.vocab_size) == (2048, 32000)
    assert spec("mistral", max_position_embeddings=None).max_position_embeddings == 32768
