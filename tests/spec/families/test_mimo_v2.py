"""MiMo-V2-Flash (its published config): full and sliding layers of their own geometry, V padded to K's head size."""
from __future__ import annotations

from family_oracle import published

from kvplan.plan.kv import KvLayout


def test_mimo_v2_flash_geometries() -> None:
    s = published("XiaomiMiMo--MiMo-V2-Flash")
    full = [x for x in s.layers if x.kind == "full"]
    sliding = [x for x in s.layers if x.kind == "sliding"]
    assert len(full) == 9 and len(sliding) == 39
    # V padded to K's 192: 9 x 4 KV heads x 2 x 192 x 2 B grow with the request
    lay = KvLayout.of(s, "auto")
    assert lay.request_bytes(128, paged=False) == 128 * (9 * 4 * 2 * 192 * 2 + 39 * 8 * 2 * 192 * 2)
