"""ChunkedLocal against vLLM's ChunkedLocalAttentionSpec: cdiv(min(chunk + max_num_batched_tokens,
max_model_len), block) blocks, no extra one; a request keeps its current chunk."""
from __future__ import annotations

from kvplan.spec.cache import ChunkedLocal
from kvplan.spec.dtypes import KV_DTYPES

BF16 = KV_DTYPES["bfloat16"]


def test_chunked_local_pool_reserve() -> None:
    scout = ChunkedLocal(8, 128, 128, chunk_tokens=8192)  # Llama-4 Scout's attention_chunk_size
    assert scout.pool_blocks(131_072, 8192, 16) == (8192 + 8192) // 16  # no extra block
    assert scout.pool_blocks(4096, 8192, 16) == 256
    assert scout.kept_tokens(50_000) == 8192
