"""Qwen3: per-head q/k norms, no biases; Qwen2's sliding-window rule."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("qwen3")
    assert_exact("qwen3_moe")


def test_qk_norms_by_hand() -> None:
    assert spec("qwen3").params.attention == 4 * (64 * (64 + 2 * 32) + 64 * 64 + 2 * 16)
