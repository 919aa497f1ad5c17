"""`IndexedSparse`: sparse attention that keeps an index beside its attention cache, one index entry
per token in the same page, on every TP rank:

    DeepSeek-V3.2 / GLM-5 (MLA)   the lightning indexer's K: `index_head_dim` fp8 values and one fp32
                                  scale per 128, stored as bytes whatever --kv-cache-dtype says
                                  (vLLM deepseek_v2.py `DeepseekV32IndexerCache`); vLLM serves these
                                  models with 64-token blocks (FlashMLASparse)
    MiniMax-M3 (full attention)   an index key (and value) of `index_dim` elements in the KV dtype
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvplan.spec.cache.kind import CacheKind, Tokens
from kvplan.spec.cache.mla import MlaLatent

if TYPE_CHECKING:
    from kvplan.spec.dtypes import KvDtype

SPARSE_MLA_BLOCK_SIZE = 64  # vllm/platforms/cuda.py: "Forcing kv cache block size to 64 for FlashMLASparse backend"


@dataclass(frozen=True)
class IndexedSparse(CacheKind):
    base: CacheKind  # the attention cache the index selects from
    index_bytes: int = 0  # a fixed byte layout per token (DeepSeek-V3.2's indexer K)
    index_dim: int = 0  # elements per token in the KV dtype (MiniMax-M3's index key and value)

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.base.kind

    @property
    def sparse_mla(self) -> bool:  # type: ignore[override]
        return isinstance(self.base, MlaLatent) and bool(self.index_bytes)

    @property
    def window(self) -> int | None:
        return self.base.window

    @property
    def span(self) -> int | None:
        return self.base.span

    @property
    def num_kv_heads(self) -> int:
        return int(getattr(self.base, "num_kv_heads", 0))

    @property
    def head_dim_k(self) -> int:
        return int(getattr(self.base, "head_dim_k", 0))

    @property
    def head_dim_v(self) -> int:
        return int(getattr(self.base, "head_dim_v", 0))

    def with_kv_heads(self, num_kv_heads: int) -> IndexedSparse:
        with_heads = getattr(self.base, "with_kv_heads", None)
        return replace(self, base=with_heads(num_kv_heads)) if with_heads else self

    def index_entry_bytes(self, kv_dtype: KvDtype) -> int:
        if self.index_bytes:
            return self.index_bytes
        return kv_dtype.bytes_for(self.index_dim) + kv_dtype.scale_bytes_per_token_head if self.index_dim else 0

    def entry_bytes(self, kv_dtype: KvDtype, tp: int) -> int:
        return self.base.entry_bytes(kv_dtype, tp) + self.index_entry_bytes(kv_dtype)

    def kept_tokens(self, tokens: Tokens, chunk: int = 1) -> Tokens:
        return self.base.kept_tokens(tokens, chunk)

    def pool_blocks(self, max_model_len: Tokens, max_num_batched_tokens: int, block_size: int) -> Tokens:
        return self.base.pool_blocks(max_model_len, max_num_batched_tokens, block_size)

    def how(self, tp: int, kv_dtype: KvDtype) -> str:
        if isinstance(self.base, MlaLatent):
            index = f" + {self.index_entry_bytes(kv_dtype)} B indexer K"
            return f"{{n}} layers × {self.base.latent_text(tp)} × {self.base.elements_text(kv_dtype, index)}"
        return f"{self.base.how(tp, kv_dtype)} + {{n}} layers × {self.index_entry_bytes(kv_dtype):,} B index key"

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        base = self.base.describe(count, tokens, model_dtype)
        if self.index_bytes:
            return base + f", plus the sparse-attention indexer's {self.index_bytes}-byte K per token"
        return base + f", plus a {self.index_dim}-element index key per token"
