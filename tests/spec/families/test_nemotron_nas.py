"""Llama-3.3-Nemotron-Super-49B (its published config): per-block attention, 49 attention blocks of 8 KV heads."""
from __future__ import annotations

from family_oracle import published

from kvplan.plan.kv import KvLayout


def test_nemotron_nas_block_configs() -> None:
    s = published("nvidia--Llama-3_3-Nemotron-Super-49B-v1")
    assert KvLayout.of(s, "auto").bytes_per_token() == 49 * 8 * 128 * 2 * 2
