"""Gemma: a tied LM head and 8,192 positions when the config names none (GemmaConfig)."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("gemma")


def test_class_defaults() -> None:
    s = spec("gemma", max_position_embeddings=None)
    assert s.max_position_embeddings == 8192 and s.params.lm_head == 0
