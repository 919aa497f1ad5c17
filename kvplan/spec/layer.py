"""`Layer`: what one decoder layer caches (its cache kinds, kvplan.spec.cache) and whether it attends.

A layer holds at most one attention cache (full, sliding, chunked, cross, MLA latent, or one of
them with a sparse index), a compressed cache beside a window (DeepSeek-V4), and a recurrent state
(a Mamba / Gated-DeltaNet / linear-attention mixer; beside attention in Falcon-H1 and Zamba2's
hybrid layers). A KV-shared layer (Gemma-3n) attends over another layer's cache and holds none; an
MLP-only block (Nemotron-H) neither attends nor caches.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from kvplan.spec.cache.kind import CacheKind
from kvplan.spec.cache.state import RecurrentState

if TYPE_CHECKING:
    from kvplan.spec.dtypes import KvDtype


@dataclass(frozen=True)
class Layer:
    caches: tuple[CacheKind, ...] = ()
    attends: bool = True  # has attention weights (a KV-shared layer attends over another layer's cache)

    @classmethod
    def of(cls, *caches: CacheKind) -> Layer:
        """A layer that attends over the attention cache among `caches` (and holds the others)."""
        return cls(tuple(caches), any(c.attention for c in caches))

    @classmethod
    def mixer(cls, state: RecurrentState) -> Layer:
        return cls((state,), attends=False)

    @classmethod
    def mlp_only(cls) -> Layer:
        return cls((), attends=False)

    @classmethod
    def kv_shared(cls) -> Layer:
        return cls((), attends=True)

    @cached_property
    def attention(self) -> CacheKind | None:
        """The cache the layer attends over (None: attention-free, or KV-shared)."""
        return next((c for c in self.caches if c.attention), None)

    @cached_property
    def state(self) -> RecurrentState | None:
        return next((c for c in self.caches if isinstance(c, RecurrentState)), None)

    @cached_property
    def paged(self) -> tuple[CacheKind, ...]:
        """The caches kept in the pool's blocks (all but a recurrent state)."""
        return tuple(c for c in self.caches if c.paged)

    @property
    def kind(self) -> str:
        """The attention cache's kind, "shared" for a KV-shared layer, "none" for a layer that does not attend."""
        att = self.attention
        if att is not None:
            return att.kind
        return "shared" if self.attends else "none"

    @property
    def label(self) -> str:
        """The layer as reports count it: 'sliding', 'mamba2', 'full+mamba2', 'sliding+compressed/4', 'mlp'."""
        extras = [c for c in self.caches if not c.attention and c.paged]  # compressed caches
        if extras:
            return "+".join([self.kind] + [f"{c.kind}/{c.window}" for c in extras])
        state = self.state
        if state is None:
            return "mlp" if self.kind == "none" else self.kind
        return state.mixer if self.kind == "none" else f"{self.kind}+{state.mixer}"

    # the attention cache's geometry (0 without one): what transformers' K/V projections produce
    @property
    def num_kv_heads(self) -> int:
        return int(getattr(self.attention, "num_kv_heads", 0))

    @property
    def head_dim_k(self) -> int:
        return int(getattr(self.attention, "head_dim_k", 0))

    @property
    def head_dim_v(self) -> int:
        return int(getattr(self.attention, "head_dim_v", 0))

    @property
    def window_tokens(self) -> int | None:
        att = self.attention
        return att.window if att is not None else None

    def with_kv_heads(self, num_kv_heads: int) -> Layer:
        """A what-if copy whose K/V-head caches keep `num_kv_heads` heads (GQA variant)."""
        caches = tuple(c.with_kv_heads(num_kv_heads) for c in self.caches)
        return replace(self, caches=caches)

    def how(self, tp: int, kv_dtype: KvDtype) -> str:
        """The factors of this layer's per-token bytes, with '{n}' for the number of such layers."""
        terms = [c.how(tp, kv_dtype) for c in self.paged if c.per_token]
        terms += [c.how(tp, kv_dtype) for c in self.paged if not c.per_token and not c.attention]
        return " + ".join(terms)
