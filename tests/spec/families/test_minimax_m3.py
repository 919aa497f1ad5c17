"""MiniMax-M3 (its published config): K and V on every layer and a sparse index key beside them, by hand."""
from __future__ import annotations

from family_oracle import published

from kvplan.plan.kv import KvLayout


def test_minimax_m3_keys_values_and_index_keys() -> None:
    # 60 layers x 2 x 4 KV heads x 128 x 2 B, plus 57 sparse layers' 128-element index key x 2 B
    lay = KvLayout.of(published("MiniMaxAI--MiniMax-M3"), "auto")
    assert lay.bytes_per_token() == 60 * 2 * 4 * 128 * 2 + 57 * 128 * 2
