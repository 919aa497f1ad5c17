"""`FullAttention`: every token's K and V for the whole request (vLLM `FullAttentionSpec`)."""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec.cache.heads import HeadsCache


@dataclass(frozen=True)
class FullAttention(HeadsCache):
    kind = "full"
