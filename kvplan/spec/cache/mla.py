"""`MlaLatent`: one compressed latent per token for K and V together (DeepSeek-V2/V3, Kimi, GLM-4.5's
MLA; vLLM `MLAAttentionSpec`): `kv_lora_rank + qk_rope_head_dim` elements, the same latent on every
TP rank (not split by heads). Under `--kv-cache-dtype fp8_ds_mla` (DeepSeek-V3.2's sparse MLA) an
entry is FlashMLA's fixed 656-byte layout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvplan.spec.cache.kind import CacheKind
from kvplan.spec.dtypes import FP8_DS_MLA_BYTES_PER_TOKEN

if TYPE_CHECKING:
    from kvplan.spec.dtypes import KvDtype


@dataclass(frozen=True)
class MlaLatent(CacheKind):
    kind = "mla"
    latent_dim: int  # kv_lora_rank + qk_rope_head_dim

    num_kv_heads = 1  # one latent "head", replicated on every rank
    head_dim_v = 0

    @property
    def head_dim_k(self) -> int:
        return self.latent_dim

    def entry_bytes(self, kv_dtype: KvDtype, tp: int) -> int:
        if kv_dtype.name == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_TOKEN
        return kv_dtype.bytes_for(self.latent_dim) + kv_dtype.scale_bytes_per_token_head

    def elements_text(self, kv_dtype: KvDtype, index: str = "") -> str:
        """One latent's bytes as a product ('576 × 2 B', '(656 B fp8_ds_mla + 132 B indexer K)')."""
        if kv_dtype.name == "fp8_ds_mla":  # FlashMLA's fixed layout: 512 fp8 + 4 fp32 scales + 64 bf16 RoPE values
            return f"({FP8_DS_MLA_BYTES_PER_TOKEN} B fp8_ds_mla{index})"
        text = f"{self.latent_dim} × {kv_dtype.bits / 8:g} B"
        if index:
            return f"({text}{index})"
        scale = kv_dtype.scale_bytes_per_token_head
        return f"({text} + {scale} B scale)" if scale else text

    def how(self, tp: int, kv_dtype: KvDtype) -> str:
        return f"{{n}} layers × {self.latent_text(tp)} × {self.elements_text(kv_dtype)}"

    @staticmethod
    def latent_text(tp: int) -> str:
        return "1 latent" + (f" (replicated on each of {tp} TP ranks)" if tp > 1 else "")

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        return (f"{count} MLA layers: one {self.latent_dim}-element latent per token "
                "(no separate V; the same latent on every TP rank)")
