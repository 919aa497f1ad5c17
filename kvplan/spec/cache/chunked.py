"""`ChunkedLocal`: attention within the current `chunk_tokens`-token chunk (Llama-4's RoPE layers;
vLLM `ChunkedLocalAttentionSpec`). A request keeps its current chunk; vLLM's pool reserves
`min(chunk + max_num_batched_tokens, max_model_len)` tokens, with no extra block."""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec.cache.heads import HeadsCache
from kvplan.spec.cache.kind import Tokens, cap, ceil_div


@dataclass(frozen=True)
class ChunkedLocal(HeadsCache):
    kind = "chunked"
    chunk_tokens: int = 0

    @property
    def window(self) -> int | None:
        return self.chunk_tokens

    @property
    def span(self) -> int | None:
        return self.chunk_tokens

    def kept_tokens(self, tokens: Tokens, chunk: int = 1) -> Tokens:
        return cap(tokens, self.chunk_tokens - 1 + chunk)

    def pool_blocks(self, max_model_len: Tokens, max_num_batched_tokens: int, block_size: int) -> Tokens:
        return ceil_div(cap(max_model_len, self.chunk_tokens + max_num_batched_tokens), block_size)

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        c = self.chunk_tokens
        return (f"{count} chunked-local layers (chunk {c:,}): keep at most their current chunk, "
                f"min({tokens:,}, {c:,}) = {self.kept_tokens(tokens):,} tokens")
