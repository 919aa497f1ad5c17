"""MiniMax-M2: q/k norms over all heads at once (q_out + kv_out weights) whose statistics span the TP group
(one more all-reduce per layer; none with per-head norms)."""
from __future__ import annotations

from family_oracle import assert_exact, spec


def test_matches_transformers() -> None:
    assert_exact("minimax_m2")


def test_full_width_norms_and_their_all_reduce() -> None:
    s = spec("minimax_m2")
    assert s.params.attention == 4 * (64 * 128 + 64 * 64 + 64 + 32)
    assert s.tp_norm_allreduces == 4
    assert spec("minimax_m2", qk_norm_type="per_head").tp_norm_allreduces == 0
