"""Command-R7B (`cohere2`): three sliding layers, then one full (sliding_window_pattern, default 4)."""
from __future__ import annotations

from family_oracle import assert_within, spec


def test_matches_transformers() -> None:
    assert_within("cohere2", 0.002)


def test_every_fourth_layer_is_full() -> None:
    s = spec("cohere2", num_hidden_layers=8, sliding_window=512)
    assert [layer.kind for layer in s.layers] == ["sliding"] * 3 + ["full"] + ["sliding"] * 3 + ["full"]
