"""`CompressedEntries`: DeepSeek-V4's compressed cache beside each layer's window: one fixed-layout
entry per `ratio` tokens of the whole request (r = 4, "CSA": 584 bytes and the indexer's 132; r = 128,
"HCA": 584 bytes), on every TP rank. Blocks hold whole entries, so the block size is raised to a
multiple of the ratio. vLLM's pool layout for these caches is not modelled (`pool_modelled`)."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kvplan.spec.cache.kind import CacheKind, Tokens, ceil_div

if TYPE_CHECKING:
    from kvplan.spec.dtypes import KvDtype


@dataclass(frozen=True)
class CompressedEntries(CacheKind):
    kind = "compressed"
    per_token = False
    attention = False
    pool_modelled = False
    ratio: int
    compressed_entry_bytes: int

    @property
    def fixed_layout(self) -> bool:
        return True

    @property
    def window(self) -> int | None:
        return self.ratio

    @property
    def block_multiple(self) -> int:
        return self.ratio

    def entry_bytes(self, kv_dtype: KvDtype, tp: int) -> int:
        return self.compressed_entry_bytes

    def token_bytes(self, kv_dtype: KvDtype, tp: int) -> Fraction:
        return Fraction(self.compressed_entry_bytes, self.ratio)

    def page_bytes(self, block_size: int, kv_dtype: KvDtype, tp: int) -> int:
        return ceil_div(block_size, self.ratio) * self.compressed_entry_bytes

    def request_blocks(self, tokens: int, block_size: int) -> int:
        return ceil_div(tokens, block_size) if tokens > 0 else 0

    def request_bytes(self, tokens: int, block_size: int, kv_dtype: KvDtype, tp: int, *, paged: bool = True) -> int:
        if tokens <= 0:
            return 0
        if paged:
            return self.request_blocks(tokens, block_size) * self.page_bytes(block_size, kv_dtype, tp)
        return tokens // self.ratio * self.compressed_entry_bytes

    def kept_tokens(self, tokens: Tokens, chunk: int = 1) -> Tokens:
        return tokens

    def how(self, tp: int, kv_dtype: KvDtype) -> str:
        return f"1 × {self.compressed_entry_bytes} B per {self.ratio} tokens"

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        return (f"{count} compressed caches (one {self.compressed_entry_bytes}-byte entry per {self.ratio} tokens): "
                f"keep every entry, {tokens // self.ratio:,} at {tokens:,} tokens")
