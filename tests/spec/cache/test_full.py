"""FullAttention: every token's K and V, vLLM's FullAttentionSpec page (2 x block x heads x head size x
dtype bytes) and pool reserve cdiv(max_model_len, block), by hand for Llama-2-7B (32 heads of 128)."""
from __future__ import annotations

from kvplan.spec.cache import FullAttention
from kvplan.spec.dtypes import KV_DTYPES

BF16, FP8, INT8 = KV_DTYPES["bfloat16"], KV_DTYPES["fp8"], KV_DTYPES["int8"]


def test_entry_is_k_and_v_of_every_head() -> None:
    llama = FullAttention(32, 128, 128)
    assert llama.entry_bytes(BF16, 1) == 2 * 32 * 128 * 2 == 16_384
    assert llama.entry_bytes(FP8, 1) == 8_192
    assert llama.page_bytes(16, BF16, 1) == 16 * 16_384  # vLLM's page: one block of one layer


def test_full_attention_keeps_every_token() -> None:
    full = FullAttention(8, 128, 128)
    assert full.kept_tokens(100_000) == 100_000
    assert full.request_blocks(4097, 16) == 257
    assert full.pool_blocks(32_768, 8192, 16) == 2048  # FullAttentionSpec: cdiv(max_model_len, block_size)
    assert full.shares_prefix(4096)
