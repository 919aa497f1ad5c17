"""Sliding windows, chunked-local attention and cross-attention against vLLM's `max_memory_usage_bytes`
(vllm/v1/kv_cache_interface.py): SlidingWindowSpec reserves cdiv(min(window - 1 + max_num_batched_tokens,
max_model_len), block) + 1 blocks; ChunkedLocalAttentionSpec cdiv(min(chunk + max_num_batched_tokens,
max_model_len), block); CrossAttentionSpec cdiv(max_encoder_len, block)."""
from __future__ import annotations

import numpy as np

from kvplan.spec.cache import ChunkedLocal, CrossAttention, SlidingWindow
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


def test_chunked_local_pool_reserve() -> None:
    scout = ChunkedLocal(8, 128, 128, chunk_tokens=8192)  # Llama-4 Scout's attention_chunk_size
    assert scout.pool_blocks(131_072, 8192, 16) == (8192 + 8192) // 16  # no extra block
    assert scout.pool_blocks(4096, 8192, 16) == 256
    assert scout.kept_tokens(50_000) == 8192


def test_cross_attention_holds_encoder_tokens_whatever_the_text() -> None:
    # Llama-3.2-11B-Vision: 4 tiles x ((560 / 14)^2 + 1) patches = 6,404 encoder tokens
    mllama = CrossAttention(8, 128, 128, encoder_tokens=6404)
    assert mllama.kept_tokens(10) == 6404 and mllama.kept_tokens(100_000) == 6404
    assert mllama.request_blocks(10, 16) == 401  # ceil(6404 / 16)
    assert mllama.pool_blocks(131_072, 8192, 16) == 401
    assert mllama.token_bytes(BF16, 1) == 0  # not part of "KV per token"
    assert not mllama.shares_prefix(100)
