"""`nemotron`'s switches (an up/down MLP, LayerNorm biases) give transformers' own count exactly."""
from __future__ import annotations

from family_oracle import assert_exact


def test_matches_transformers() -> None:
    assert_exact("nemotron")
