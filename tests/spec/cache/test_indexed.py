"""IndexedSparse: DeepSeek-V3.2's indexer K (index_head_dim 128 fp8 values + one fp32 scale) in the latent's page,
served in 64-token blocks; MiniMax-M3's index key in the KV dtype on every rank."""
from __future__ import annotations

from kvplan.plan.kv import unified_block_size
from kvplan.spec.cache import IndexedSparse, MlaLatent
from kvplan.spec.dtypes import KV_DTYPES
from kvplan.spec.profiles import load_model

BF16, FP8, DS_MLA = KV_DTYPES["bfloat16"], KV_DTYPES["fp8"], KV_DTYPES["fp8_ds_mla"]


def test_indexer_k_rides_in_the_same_page() -> None:
    v32 = IndexedSparse(MlaLatent(576), index_bytes=128 + 4)
    assert v32.kind == "mla" and v32.sparse_mla
    assert v32.entry_bytes(BF16, 4) == 1152 + 132
    assert v32.entry_bytes(DS_MLA, 1) == 656 + 132
    assert v32.page_bytes(64, DS_MLA, 1) == 64 * 788


def test_sparse_mla_models_run_64_token_blocks() -> None:
    spec = load_model("deepseek-v3.2")
    assert unified_block_size(spec, 16, spec.kv_dtype("auto")) == 64


def test_index_key_in_the_kv_dtype() -> None:
    from kvplan.spec.cache import FullAttention

    m3 = IndexedSparse(FullAttention(4, 128, 128), index_dim=128)  # MiniMax-M3's sparse layers
    assert m3.kind == "full" and not m3.sparse_mla
    assert m3.entry_bytes(BF16, 1) == 2 * 4 * 128 * 2 + 128 * 2
    assert m3.entry_bytes(BF16, 2) == 2 * 2 * 128 * 2 + 128 * 2  # the key is not split by TP
