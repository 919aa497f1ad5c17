"""K/V-head caches against vLLM's page arithmetic (vllm/v1/kv_cache_interface.py `AttentionSpec.page_size_bytes`:
2 x block_size x num_kv_heads x head_size x dtype bytes), worked by hand for Llama-2-7B (32 heads of 128)."""
from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.spec.cache import FullAttention
from kvplan.spec.dtypes import KV_DTYPES

BF16, FP8, INT8 = KV_DTYPES["bfloat16"], KV_DTYPES["fp8"], KV_DTYPES["int8"]


def test_tensor_parallel_splits_heads_and_replicates_past_them() -> None:
    gqa = FullAttention(8, 128, 128)  # Llama-3-8B
    assert gqa.entry_bytes(BF16, 2) == 2 * 4 * 128 * 2
    assert gqa.entry_bytes(BF16, 16) == 2 * 1 * 128 * 2  # vLLM get_num_kv_heads: max(1, 8 // 16)


def test_int8_stores_a_scale_beside_k_and_v() -> None:
    # kvplan's int8 layout: a float16 scale per (token, head) for K and again for V
    assert FullAttention(8, 128, 128).entry_bytes(INT8, 1) == 8 * ((128 + 2) + (128 + 2))


def test_unequal_k_and_v_widths() -> None:
    assert FullAttention(4, 192, 128).entry_bytes(BF16, 1) == 4 * (192 + 128) * 2


def test_fp8_ds_mla_is_refused_for_head_caches() -> None:
    with pytest.raises(KvplanError, match="sparse MLA layers only"):
        FullAttention(8, 128, 128).entry_bytes(KV_DTYPES["fp8_ds_mla"], 1)
