"""Phi-3: 4,096 positions when the config names none (Phi3Config)."""
from __future__ import annotations

from family_oracle import spec


def test_class_default_length() -> None:
    assert spec("phi3", max_position_embeddings=None).max_position_embeddings == 4096
