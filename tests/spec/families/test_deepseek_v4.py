"""DeepSeek-V4-Flash (its published config): a 128-token fp8 window on every layer and compressed
caches, by hand from the module docstring's layout; 284 B parameters as published."""
from __future__ import annotations

from family_oracle import published

from kvplan.plan.kv import KvLayout


def test_deepseek_v4_flash_window_and_compressed_caches() -> None:
    lay = KvLayout.of(published("deepseek-ai--DeepSeek-V4-Flash"), "auto")
    # 43 layers keep 128 window entries of 584 B; 21 CSA layers 716 B per 4 tokens, 20 HCA layers 584 B per 128
    assert lay.request_bytes(4096, paged=False) == 43 * 128 * 584 + 21 * 1024 * 716 + 20 * 32 * 584
    assert lay.spec.params.total // 10**9 == 284  # as published
