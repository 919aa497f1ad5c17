"""`PooledKeys`: beside full attention, one pooled K/V entry per `stride` tokens (the worked example
of docs/architecture.md: as it would be dropped into kvplan/spec/cache/)."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kvplan.spec.cache.kind import CacheKind, ceil_div
from kvplan.spec.dtypes import KvDtype


@dataclass(frozen=True)
class PooledKeys(CacheKind):
    kind = "pooled"
    per_token = False  # fewer entries than tokens: not "KV per token", shares no prefix
    num_kv_heads: int
    head_dim: int
    stride: int

    @property
    def window(self) -> int | None:  # its KV-cache group's parameter
        return self.stride

    def entry_bytes(self, kv_dtype: KvDtype, tp: int) -> int:
        return max(1, self.num_kv_heads // tp) * 2 * kv_dtype.bytes_for(self.head_dim)

    def token_bytes(self, kv_dtype: KvDtype, tp: int) -> Fraction:
        return Fraction(self.entry_bytes(kv_dtype, tp), self.stride)

    def kept_tokens(self, tokens: Any, chunk: int = 1) -> Any:
        return tokens // self.stride

    def page_bytes(self, block_size: int, kv_dtype: KvDtype, tp: int) -> int:
        return ceil_div(block_size, self.stride) * self.entry_bytes(kv_dtype, tp)

    def request_blocks(self, tokens: int, block_size: int) -> int:
        return ceil_div(tokens, block_size) if tokens > 0 else 0

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        return f"{count} pooled caches: one entry per {self.stride} tokens, {tokens // self.stride:,} at {tokens:,}"
