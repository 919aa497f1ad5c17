"""Qwen2: biased q/k/v; `sliding_window` only with use_sliding_window, from layer max_window_layers on
(transformers Qwen2 and vLLM qwen2.py); 32,768 positions by default."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("qwen2")
    assert_exact("qwen2_moe")


def test_windows_follow_use_sliding_window() -> None:
    assert {layer.kind for layer in spec("qwen2", sliding_window=512).layers} == {"full"}
    s = spec("qwen2", sliding_window=512, use_sliding_window=True, max_window_layers=2)
    assert [layer.kind for layer in s.layers] == ["full", "full", "sliding", "sliding"]


def test_qkv_bias_and_default_length() -> None:
    p = spec("qwen2").params
    assert p.attention == 4 * (64 * (64 + 2 * 32) + 64 * 64 + (64 + 2 * 32))
    assert spec("qwen2", max_position_embeddings=None).max_position_embeddings == 32768
