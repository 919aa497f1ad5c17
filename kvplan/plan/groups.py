"""vLLM's KV-cache groups (vllm/v1/core/kv_cache_utils.py `get_kv_cache_groups`): layers of one
cache type share a block table; hybrid models get their page sizes unified and are split into
groups of `group_size` layers that share the pool's tensors. State layers (Mamba, Gated-DeltaNet)
form groups of their own whose page is the state padded to the attention page (vLLM MambaSpec).
Pure Python: `kvplan estimate` imports it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

from kvplan.plan.kv import bytes_per_block, state_page_bytes
from kvplan.spec.cache import CacheKind
from kvplan.spec.cache.kind import Tokens
from kvplan.spec.model import ModelSpec

HYBRID_GROUP_RATIO = 1.5  # vLLM's hybrid grouping: group_size = max layer count when max < 1.5 x min
MAMBA_CACHE_MODES = ("none", "align")  # "all" (a state per block) is not modelled
HYBRID_PREFIX_CACHING_SINCE = (0, 28, 0)  # PR #50991: prefix caching on for hybrids, mamba_cache_mode "align"


@dataclass(frozen=True)
class KvGroup:
    """One vLLM KV-cache group type: `count` groups of this attention type share the block pool."""

    kind: str  # full, sliding, chunked, mla, cross, state, compressed
    window_tokens: int | None  # sliding window, chunk size, encoder tokens (cross) or compress ratio
    count: int  # number of groups of this type
    layers: int  # layers of this type on the stage
    block_size: int  # tokens per block (scaled up when page sizes are unified; state: mamba_block_size)
    page_bytes: int  # one block of one layer
    copies: int = 1  # state: pages per request (2 in prefix caching's "align" mode)
    cache: CacheKind | None = field(default=None, compare=False)  # one layer's cache of this type

    def blocks_per_request(self, max_model_len: Tokens, max_num_batched_tokens: int) -> Tokens:
        """vLLM's `KVCacheSpec.max_memory_usage_bytes / page_size` for one request; `max_model_len`
        may be a numpy array (the sweep)."""
        assert self.cache is not None, "a group is made from a layer's cache"
        return self.copies * self.cache.pool_blocks(max_model_len, max_num_batched_tokens, self.block_size)


# --- grouping (vllm/v1/core/kv_cache_utils.py get_kv_cache_groups) -------------------------
@dataclass(frozen=True)
class StateLayout:
    """How vLLM keeps a hybrid model's state: pages per request and the state group's block size."""

    copies: int = 1  # 1 ("none"); 2 in prefix caching's "align" mode
    block_tokens: int = 0  # MambaSpec.block_size: max_model_len ("none") or the attention block size ("align")


def mamba_cache_mode(spec: ModelSpec, mode: str | None, version: tuple[int, int, int]) -> str:
    """vLLM's mamba_cache_mode: prefix caching is off by default for hybrid models until 0.28
    ("none": one state page per request); 0.28 turns it on with "align" (two pages: the running
    state and the one at the last block boundary; vLLM PR #50991). Attention-free models: "none"."""
    if not spec.has_state:
        return "none"
    if mode is not None:
        return mode
    return "align" if spec.has_attention_cache and version >= HYBRID_PREFIX_CACHING_SINCE else "none"


def state_copies(spec: ModelSpec, mode: str | None, version: tuple[int, int, int]) -> int:
    """State pages one request holds per state layer (MambaSpec.max_memory_usage_bytes / page)."""
    return 2 if mamba_cache_mode(spec, mode, version) == "align" else 1


def _layer_pages(spec: ModelSpec, layer_indices: list[int] | range, block_size: int, kv_cache_dtype: str,
                 tp: int) -> tuple[dict[tuple[str, int | None], list[int]], dict[tuple[str, int | None], set[int]],
                                   dict[tuple[str, int | None], CacheKind]]:
    """Layers, page sizes and one cache per cache type; a Falcon-H1 layer is in an attention type and
    the state type."""
    kv_dtype = spec.kv_dtype(kv_cache_dtype)
    kinds: dict[tuple[str, int | None], list[int]] = {}
    pages: dict[tuple[str, int | None], set[int]] = {}
    caches: dict[tuple[str, int | None], CacheKind] = {}
    for i in layer_indices:
        layer = spec.layers[i]
        for g in layer_cache_groups(spec, i, block_size, kv_cache_dtype, tp):
            key = (g.kind, g.window_tokens)
            kinds.setdefault(key, []).append(i)
            pages.setdefault(key, set()).add(g.page_bytes)
            caches.setdefault(key, g.cache)  # type: ignore[arg-type]
        if layer.state is not None:
            kinds.setdefault(("state", None), []).append(i)
            pages.setdefault(("state", None), set()).add(state_page_bytes(spec, block_size, kv_dtype, tp))
            caches.setdefault(("state", None), layer.state)
    return kinds, pages, caches


def layer_cache_groups(spec: ModelSpec, i: int, block_size: int, kv_cache_dtype: str, tp: int) -> list[KvGroup]:
    """The paged caches of layer `i`, one single-layer group each: its attention cache and, in
    DeepSeek-V4, its compressed cache (`window_tokens` = the ratio), whose blocks follow the request."""
    kv_dtype = spec.kv_dtype(kv_cache_dtype)
    return [KvGroup(c.kind, c.window, 1, 1, block_size, c.page_bytes(block_size, kv_dtype, tp), cache=c)
            for c in spec.layers[i].paged]


def kv_groups(spec: ModelSpec, layer_indices: list[int] | range, block_size: int, kv_cache_dtype: str,
              tp: int, state: StateLayout | None = None) -> tuple[tuple[KvGroup, ...], int, int]:
    """(group types, group_size, block_bytes) for the layers of one stage; `block_size` is the
    unified one (`unified_block_size`) for hybrid state models."""
    state = state or StateLayout(block_tokens=block_size)
    kinds, pages, caches = _layer_pages(spec, layer_indices, block_size, kv_cache_dtype, tp)
    if not kinds:
        return (), 0, 0

    def group(key: tuple[str, int | None], count: int, layers: int, tokens: int, page: int) -> KvGroup:
        if key[0] == "state":
            return KvGroup("state", None, count, layers, state.block_tokens or tokens, page, state.copies, caches[key])
        return KvGroup(key[0], key[1], count, layers, tokens, page, cache=caches[key])

    if len(kinds) == 1:
        (key, idx), = kinds.items()
        if len(pages[key]) == 1:  # uniform: one group, every layer its own tensor
            page = next(iter(pages[key]))
            return (group(key, 1, len(idx), block_size, page),), len(idx), page * len(idx)
        total = bytes_per_block(spec, block_size, kv_cache_dtype, tp, 1, layer_indices=idx)  # UniformTypeKVCacheSpecs
        return (group(key, 1, len(idx), block_size, total),), 1, total
    if not all(c.pool_modelled for c in caches.values()):
        # DeepSeek-V4: vLLM's pool layout is not modelled; each cache type one group of its layers'
        # pages, a "block" one block in every cache (capacity is counted in bytes: budget._log_lines)
        def page_sum(key: tuple[str, int | None], idx: list[int]) -> int:
            return sum(g.page_bytes for i in idx for g in layer_cache_groups(spec, i, block_size, kv_cache_dtype, tp)
                       if (g.kind, g.window_tokens) == key)

        groups = [group(key, 1, len(idx), block_size, page_sum(key, idx)) for key, idx in kinds.items()]
        return tuple(groups), 1, sum(g.page_bytes for g in groups)
    # hybrid: unify page sizes by scaling block sizes, then groups of `group_size` layers
    page_of = {k: max(p) for k, p in pages.items()}
    max_page = max(page_of.values())
    counts = [len(v) for v in kinds.values()]
    group_size = min(counts)
    if max(counts) < group_size * HYBRID_GROUP_RATIO:
        group_size = max(counts)
    groups = []
    for key, idx in kinds.items():
        ratio = max_page // page_of[key] if max_page % page_of[key] == 0 else 1
        groups.append(group(key, ceil(len(idx) / group_size), len(idx), block_size * ratio, max_page))
    return tuple(groups), group_size, max_page * group_size
