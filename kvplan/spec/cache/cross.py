"""`CrossAttention`: the encoder's `encoder_tokens` K and V per request, whatever the text length
(Llama-3.2-Vision's cross-attention layers; vLLM `CrossAttentionSpec`). Fixed per request: it is
not part of "KV per token" and no prefix shares it."""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec.cache.heads import HeadsCache
from kvplan.spec.cache.kind import Tokens, ceil_div


@dataclass(frozen=True)
class CrossAttention(HeadsCache):
    kind = "cross"
    per_token = False
    encoder_tokens: int = 0

    @property
    def window(self) -> int | None:
        return self.encoder_tokens

    def kept_tokens(self, tokens: Tokens, chunk: int = 1) -> Tokens:
        return tokens * 0 + self.encoder_tokens

    def pool_blocks(self, max_model_len: Tokens, max_num_batched_tokens: int, block_size: int) -> Tokens:
        return max_model_len * 0 + ceil_div(self.encoder_tokens, block_size)

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        return (f"{count} cross-attention layers: {self.encoder_tokens:,} encoder tokens per request, "
                "whatever the text length")
