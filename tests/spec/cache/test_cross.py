"""CrossAttention against vLLM's CrossAttentionSpec: cdiv(max_encoder_len, block) blocks, whatever the text."""
from __future__ import annotations

from kvplan.spec.cache import CrossAttention
from kvplan.spec.dtypes import KV_DTYPES

BF16 = KV_DTYPES["bfloat16"]


def test_cross_attention_holds_encoder_tokens_whatever_the_text() -> None:
    # Llama-3.2-11B-Vision: 4 tiles x ((560 / 14)^2 + 1) patches = 6,404 encoder tokens
    mllama = CrossAttention(8, 128, 128, encoder_tokens=6404)
    assert mllama.kept_tokens(10) == 6404 and mllama.kept_tokens(100_000) == 6404
    assert mllama.request_blocks(10, 16) == 401  # ceil(6404 / 16)
    assert mllama.pool_blocks(131_072, 8192, 16) == 401
    assert mllama.token_bytes(BF16, 1) == 0  # not part of "KV per token"
    assert not mllama.shares_prefix(100)
