"""Qwen2-VL / Qwen2.5-VL decoders: Qwen2's biased q/k/v (checked by hand against the 7B checkpoints)."""
from __future__ import annotations

from family_oracle import spec


def test_qkv_bias() -> None:
    for t in ("qwen2_vl", "qwen2_5_vl"):
        assert spec(t).params.attention == 4 * (64 * 128 + 64 * 64 + 128)
        assert not any("not one kvplan has checked" in w for w in spec(t).warnings)
