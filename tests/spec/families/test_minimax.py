"""MiniMax-Text-01 / M1: attn_type_list (0 lightning, 1 softmax) decides each layer."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("minimax")


def test_attn_type_list() -> None:
    s = spec("minimax", attn_type_list=[0, 1, 0, 1])
    assert [x.label for x in s.layers] == ["linear", "full", "linear", "full"]
    assert "not one kvplan has checked" in " ".join(spec("minimax_m1", attn_type_list=[0, 1, 0, 1]).warnings)
