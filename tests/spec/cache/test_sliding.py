"""SlidingWindow against vLLM's SlidingWindowSpec.max_memory_usage_bytes (vllm/v1/kv_cache_interface.py):
cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1 blocks; a request keeps its window."""
from __future__ import annotations

import numpy as np

from kvplan.spec.cache import SlidingWindow
from kvplan.spec.dtypes import KV_DTYPES

BF16 = KV_DTYPES["bfloat16"]


def test_sliding_window_pool_reserve() -> None:
    gemma = SlidingWindow(16, 128, 128, window_tokens=4096)
    # min(4095 + 8192, 32768) = 12287 tokens -> 768 blocks of 16, + 1 for a window off a block boundary
    assert gemma.pool_blocks(32_768, 8192, 16) == 769
    assert gemma.pool_blocks(2048, 8192, 16) == 129  # short model: the whole length, + 1
    arr = gemma.pool_blocks(np.array([2048, 32_768]), 8192, 16)
    assert list(arr) == [129, 769]


def test_sliding_window_keeps_its_window() -> None:
    mistral = SlidingWindow(8, 128, 128, window_tokens=4096)
    assert mistral.kept_tokens(100) == 100
    assert mistral.kept_tokens(100_000) == 4096  # window - 1 + one decoded token
    assert mistral.kept_tokens(100_000, chunk=512) == 4095 + 512
    assert mistral.request_bytes(10_000, 16, BF16, 1, paged=False) == 4096 * 2 * 8 * 128 * 2
    assert not mistral.shares_prefix(10_000) and mistral.shares_prefix(4096)
