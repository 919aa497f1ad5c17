"""`CacheKind`: one layer's cache of one kind, as vLLM's `KVCacheSpec` (vllm/v1/kv_cache_interface.py).

A kind owns its bytes: what one cached entry costs on one tensor-parallel rank, how many tokens a
request of a given length keeps, the bytes of one block (page) of it, what vLLM reserves per request
when it sizes the pool (`max_memory_usage_bytes / page_size_bytes`), and how a report describes it.
The planner sums kinds; it never asks which kind it holds.

`tokens` may be an int or a numpy integer array (the vectorised sweep): the rules use only
arithmetic, `min` through `_cap`, and ceil division written as `-(-a // b)`.
"""
from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from kvplan.spec.dtypes import KvDtype

Tokens = TypeVar("Tokens", int, "NDArray[Any]")  # an int, or a numpy integer array


def cap(tokens: Tokens, limit: int) -> Tokens:
    """min(tokens, limit), elementwise on numpy arrays without importing numpy."""
    clip = getattr(tokens, "clip", None)
    return cast(Tokens, clip(max=limit) if clip is not None else min(cast(int, tokens), limit))


def ceil_div(a: Any, b: int) -> Any:
    return -(-a // b)


class CacheKind:
    """Base of every cache kind. Subclasses are frozen dataclasses; the defaults here are those of a
    cache that holds one entry per token of the request, in blocks of `block_size` tokens."""

    kind: ClassVar[str]  # the KV-cache group type vLLM keys layers by: full, sliding, chunked, mla, cross, ...
    per_token: ClassVar[bool] = True  # one entry per text token: counts in "KV per token", shares a prefix
    attention: ClassVar[bool] = True  # an attention cache (the layer attends over it); False: state, compressed
    paged: ClassVar[bool] = True  # in blocks of the pool (a recurrent state's page is the pool's hybrid rule)
    pool_modelled: ClassVar[bool] = True  # vLLM's pool layout for it is modelled (DeepSeek-V4's is not)
    sparse_mla: bool = False  # DeepSeek-V3.2's sparse MLA: vLLM's fp8_ds_mla cache and 64-token blocks

    @property
    def fixed_layout(self) -> bool:
        """A byte layout of its own whatever --kv-cache-dtype says."""
        return False

    def with_kv_heads(self, num_kv_heads: int) -> CacheKind:
        """A what-if copy keeping `num_kv_heads` K/V heads (GQA variant); a kind without heads is itself."""
        return self

    @property
    def block_multiple(self) -> int:
        """Blocks must hold a whole number of this cache's entries (a compress ratio); 1: any size."""
        return 1

    @property
    def window(self) -> int | None:
        """The group's size parameter: a sliding window, a chunk, encoder tokens, a compress ratio."""
        return None

    @property
    def span(self) -> int | None:
        """Keys one query attends to at most (a window or chunk), None for the whole context."""
        return None

    def entry_bytes(self, kv_dtype: KvDtype, tp: int) -> int:
        """Bytes of one cached entry on one TP rank."""
        raise NotImplementedError

    def token_bytes(self, kv_dtype: KvDtype, tp: int) -> Fraction:
        """What one more text token adds to the cache, before any window cap (0 for fixed caches)."""
        return Fraction(self.entry_bytes(kv_dtype, tp)) if self.per_token else Fraction(0)

    def kept_tokens(self, tokens: Tokens, chunk: int = 1) -> Tokens:
        """Entries one request of `tokens` text tokens holds at once (a prefill chunk of `chunk`
        tokens is written before tokens slide out of a window)."""
        return tokens

    def page_bytes(self, block_size: int, kv_dtype: KvDtype, tp: int) -> int:
        """One block of this cache on one rank."""
        return block_size * self.entry_bytes(kv_dtype, tp)

    def request_blocks(self, tokens: int, block_size: int) -> int:
        """Blocks one request of `tokens` holds (paged)."""
        return ceil_div(self.kept_tokens(tokens), block_size) if tokens > 0 else 0

    def request_bytes(self, tokens: int, block_size: int, kv_dtype: KvDtype, tp: int, *, paged: bool = True) -> int:
        """One request's bytes in this cache on one rank: whole blocks (paged) or exact entries."""
        if paged:
            return self.request_blocks(tokens, block_size) * self.page_bytes(block_size, kv_dtype, tp)
        return self.kept_tokens(tokens) * self.entry_bytes(kv_dtype, tp) if tokens > 0 else 0

    def pool_blocks(self, max_model_len: Tokens, max_num_batched_tokens: int, block_size: int) -> Tokens:
        """vLLM's `max_memory_usage_bytes / page_size_bytes`: blocks the pool must hold for one request
        of `max_model_len` tokens when vLLM checks that one fits."""
        return ceil_div(max_model_len, block_size)

    def shares_prefix(self, tokens: int) -> bool:
        """Whether a prefix's full blocks are stored once for requests of `tokens` that share it."""
        return self.per_token and self.kept_tokens(tokens) >= tokens

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        """One line for the estimate: what `count` such layers keep for a request of `tokens`."""
        return f"{count} {self.kind}-attention layers: keep all {tokens:,} tokens"

    def how(self, tp: int, kv_dtype: KvDtype) -> str:
        """The factors of one layer's per-token bytes ('8 KV heads × 128 × 2 B'), after '{n} layers × '."""
        return f"{self.entry_bytes(kv_dtype, tp):,} B"
