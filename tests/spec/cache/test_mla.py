"""MLA latents by hand from the configs (kv_lora_rank 512 + qk_rope_head_dim 64) and FlashMLA's fp8_ds_mla
layout (vllm/v1/attention/backends/mla/flashmla_sparse.py: 512 fp8 + 4 fp32 scales + 64 bf16 RoPE = 656 B)."""
from __future__ import annotations

from kvplan.spec.cache import MlaLatent
from kvplan.spec.dtypes import KV_DTYPES

BF16, FP8, DS_MLA = KV_DTYPES["bfloat16"], KV_DTYPES["fp8"], KV_DTYPES["fp8_ds_mla"]


def test_one_latent_on_every_rank() -> None:
    v3 = MlaLatent(512 + 64)
    assert v3.entry_bytes(BF16, 1) == 1152
    assert v3.entry_bytes(BF16, 8) == 1152  # replicated, not split by heads
    assert v3.entry_bytes(FP8, 1) == 576
    assert v3.entry_bytes(DS_MLA, 1) == 656
