"""`HeadsCache`: the K and V vectors of `num_kv_heads` heads per token (vLLM `AttentionSpec`), the
shape full, sliding-window, chunked-local and cross-attention caches share.

Under tensor parallelism vLLM splits the KV heads over the ranks and replicates them when there
are more ranks than heads (`get_num_kv_heads`). A quantized KV dtype with a per-(token, head) scale
stores one scale beside K and one beside V.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvplan.errors import KvplanError
from kvplan.spec.cache.kind import CacheKind

if TYPE_CHECKING:
    from kvplan.spec.dtypes import KvDtype


@dataclass(frozen=True)
class HeadsCache(CacheKind):
    num_kv_heads: int
    head_dim_k: int  # elements per K vector
    head_dim_v: int  # elements per V vector (0: V is not cached apart)
    # a fixed byte layout per token whatever --kv-cache-dtype says (DeepSeek-V4's fp8 entries); 0: none
    fixed_entry_bytes: int = 0

    @property
    def fixed_layout(self) -> bool:
        return bool(self.fixed_entry_bytes)

    def heads_per_rank(self, tp: int) -> int:
        return max(1, self.num_kv_heads // tp)

    def entry_bytes(self, kv_dtype: KvDtype, tp: int) -> int:
        if self.fixed_entry_bytes:
            return self.fixed_entry_bytes  # one fixed-layout entry per token, on every rank
        if kv_dtype.name == "fp8_ds_mla":
            raise KvplanError(
                f"--kv-cache-dtype fp8_ds_mla applies to sparse MLA layers only, not {self.kind} attention"
            )
        k = kv_dtype.bytes_for(self.head_dim_k) + kv_dtype.scale_bytes_per_token_head
        v = kv_dtype.bytes_for(self.head_dim_v) + kv_dtype.scale_bytes_per_token_head if self.head_dim_v else 0
        return self.heads_per_rank(tp) * (k + v)

    def with_kv_heads(self, num_kv_heads: int) -> HeadsCache:
        return replace(self, num_kv_heads=num_kv_heads)

    def heads_text(self, tp: int) -> str:
        h = self.heads_per_rank(tp)
        if tp == 1:
            return f"{h} KV heads"
        if tp > self.num_kv_heads:
            return f"{h} KV head (replicated: tp {tp} > {self.num_kv_heads} KV heads)"
        return f"{h} KV heads ({self.num_kv_heads} / tp {tp})"

    def how(self, tp: int, kv_dtype: KvDtype) -> str:
        if self.fixed_entry_bytes:
            return f"{{n}} layers × {self.fixed_entry_bytes} B fp8 entry"
        if self.head_dim_v != self.head_dim_k:
            return (f"{{n}} layers × {self.heads_text(tp)} × ({self.head_dim_k} + {self.head_dim_v}) × "
                    f"{kv_dtype.bits / 8:g} B")
        text = f"{self.head_dim_k} × {kv_dtype.bits / 8:g} B"
        if kv_dtype.scale_bytes_per_token_head:
            text = f"({text} + {kv_dtype.scale_bytes_per_token_head} B scale)"
        return f"2 (K, V) × {{n}} layers × {self.heads_text(tp)} × {text}"
