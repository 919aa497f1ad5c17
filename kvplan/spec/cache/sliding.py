"""`SlidingWindow`: the last `window_tokens` tokens' K and V (vLLM `SlidingWindowSpec`).

Blocks that leave the window are freed, so a request keeps `window - 1 + chunk` tokens at most: a
prefill chunk of `chunk` tokens is written before the tokens it pushes out are dropped. When vLLM
sizes its pool it reserves `min(window - 1 + max_num_batched_tokens, max_model_len)` tokens, and one
block more because the window need not start on a block boundary.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec.cache.heads import HeadsCache
from kvplan.spec.cache.kind import Tokens, cap, ceil_div


@dataclass(frozen=True)
class SlidingWindow(HeadsCache):
    kind = "sliding"
    window_tokens: int = 0

    @property
    def window(self) -> int | None:
        return self.window_tokens

    @property
    def span(self) -> int | None:
        return self.window_tokens

    def kept_tokens(self, tokens: Tokens, chunk: int = 1) -> Tokens:
        return cap(tokens, self.window_tokens - 1 + chunk)

    def pool_blocks(self, max_model_len: Tokens, max_num_batched_tokens: int, block_size: int) -> Tokens:
        return ceil_div(self.kept_tokens(max_model_len, max_num_batched_tokens), block_size) + 1

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        w = self.window_tokens
        return (
            f"{count} sliding layers (window {w:,}): keep min({tokens:,}, {w:,}) = {self.kept_tokens(tokens):,} tokens"
        )
