"""Cache kinds: one class per kind of per-layer cache, each owning its bytes (vLLM v1's `KVCacheSpec`
family, vllm/v1/kv_cache_interface.py). The planner (kvplan.plan.kv, kvplan.plan.groups) sums them,
the estimate view renders their `describe` and `how`, and predict times the kinds it knows.

kind.py holds `CacheKind`, the base and its defaults, and heads.py `HeadsCache` (K and V per head);
every other module is one kind (full, sliding, chunked, cross, mla, indexed, compressed, state). A new
kind is a module of its own, imported from there by the family that uses it: nothing here lists it.
The names below are re-exported for the kinds kvplan ships.
"""
from kvplan.spec.cache.chunked import ChunkedLocal
from kvplan.spec.cache.compressed import CompressedEntries
from kvplan.spec.cache.cross import CrossAttention
from kvplan.spec.cache.full import FullAttention
from kvplan.spec.cache.heads import HeadsCache
from kvplan.spec.cache.indexed import SPARSE_MLA_BLOCK_SIZE, IndexedSparse
from kvplan.spec.cache.kind import CacheKind
from kvplan.spec.cache.mla import MlaLatent
from kvplan.spec.cache.sliding import SlidingWindow
from kvplan.spec.cache.state import RecurrentState, StateKind

__all__ = ["SPARSE_MLA_BLOCK_SIZE", "CacheKind", "ChunkedLocal", "CompressedEntries", "CrossAttention",
           "FullAttention", "HeadsCache", "IndexedSparse", "MlaLatent", "RecurrentState", "SlidingWindow",
           "StateKind"]
