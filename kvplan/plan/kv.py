"""KV-cache bytes: per token, per block, per request and per batch, paged or contiguous.

Pure Python and exact (integers). `bytes_per_block` is the single function that turns a model,
a KV dtype, a block size and a parallel layout into bytes; the planner and the engine's
allocator both call it, so their block counts agree by construction.

Conventions
- A *page* is one block of one layer: `block_size` tokens x kv heads on this rank x (K + V).
- Three scopes, named in every method: *whole model* figures (`bytes_per_token`, `request_bytes`,
  `batch_bytes`) count one replica of each layer's cache and do not depend on TP or PP; *per GPU*
  figures (`..._per_gpu`) are what one GPU of the busiest pipeline stage holds (KV heads split by
  TP, replicated when tp > KV heads; MLA's latent replicated on every TP rank, as in vLLM; PP
  splits the layers); *all GPUs* (`bytes_per_token_all_gpus`) adds every rank, replicas included.
- Sliding-window layers keep at most `window` tokens (a rolling window that frees blocks that
  left it); chunked-local layers (Llama-4) at most their chunk; full and MLA layers keep every token.
- *Per-token* KV (`bytes_per_token`, `bytes_per_block`) counts only the layers whose cache grows
  with the request. Two caches are *fixed per request* and reported apart: the recurrent state
  of Mamba / Gated-DeltaNet layers (`state_bytes_per_request`, sized as vLLM's MambaSpec from the
  config's state dims and dtype) and cross-attention layers' encoder tokens. Both count in a
  request's bytes, so in max concurrency. KV-shared layers (Gemma-3n) hold nothing.
- DeepSeek-V4 layers keep a window of fixed-layout fp8 entries plus a compressed cache of one entry
  per `compress_ratio` tokens that grows with the request (`compressed_bytes`); blocks are raised to
  a multiple of the largest ratio so each holds whole entries.
- Hybrid attention + state models: vLLM raises the attention block size until one attention page
  holds a state, and pads the state to that page (`unified_block_size`, vllm/platforms/interface.py
  `_align_hybrid_block_size`; vllm/model_executor/models/config.py before it moved); `KvLayout.of`
  plans with that block size and charges each state layer one padded page per copy.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from math import ceil

from kvplan.errors import KvplanError
from kvplan.spec.cache import SPARSE_MLA_BLOCK_SIZE
from kvplan.spec.dtypes import KvDtype
from kvplan.spec.layer import Layer
from kvplan.spec.model import ModelSpec

DEFAULT_BLOCK_SIZE = 16
KERNEL_BLOCK_ALIGNMENT = 16  # FlashAttention / FlashInfer: attention block sizes are multiples of 16
MLA_KERNEL_BLOCK_ALIGNMENT = 64  # MLA backends (CUTLASS MLA: 128)

def blocks_in_budget(budget_bytes: int, bytes_per_block: int) -> int:
    """Whole blocks that fit in `budget_bytes` (floor; 0 for a negative budget or an empty block)."""
    if bytes_per_block <= 0:
        return 0
    return max(0, budget_bytes // bytes_per_block)


def largest_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """Largest n in (lo, hi] with `fits(n)`, else `lo`, by binary search.

    `fits` must be monotone (true up to some n, false beyond): every caller asks whether a
    byte count that grows with n stays within a budget. `fits(lo)` is never evaluated.
    """
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def layer_bytes_per_token(layer: Layer, kv_dtype: KvDtype, tp: int = 1) -> int:
    """Bytes one cached entry costs in the layer's attention cache on one TP rank (K and V, per-token
    scales, a sparse index); a cross-attention layer's entries are encoder tokens; 0 without one."""
    att = layer.attention
    return att.entry_bytes(kv_dtype, tp) if att is not None else 0


def token_bytes(layers: list[Layer] | tuple[Layer, ...], kv_dtype: KvDtype, tp: int) -> int:
    """What one more text token adds to `layers`' caches on one rank, no window cap, rounded up to a
    whole byte (a compressed cache grows by an entry per several tokens)."""
    return ceil(sum((c.token_bytes(kv_dtype, tp) for layer in layers for c in layer.caches), Fraction(0)))


def pp_layer_range(num_layers: int, pp: int, pp_rank: int) -> range:
    """Layers of one pipeline stage, split as vLLM's `get_pp_indices` does (extra layers go to
    the stages before the last, which also holds the LM head)."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    start = sum(sizes[:pp_rank])
    return range(start, start + sizes[pp_rank])


def validate_parallel(spec: ModelSpec, tp: int, pp: int) -> None:
    if tp <= 0 or pp <= 0:
        raise KvplanError(f"tensor/pipeline parallel sizes must be positive, got tp={tp} pp={pp}")
    for state in {layer.state for layer in spec.layers if layer.state is not None}:
        problem = state.split_error(tp)
        if problem:
            raise KvplanError(f"{spec.name}: {problem}")
    if pp > spec.num_layers:
        raise KvplanError(f"--pp {pp} is larger than {spec.name}'s {spec.num_layers} layers")
    if not spec.num_attention_heads:
        return  # attention-free (Mamba): only the state splits
    if spec.num_attention_heads % tp:
        divisors = [d for d in range(1, spec.num_attention_heads + 1) if spec.num_attention_heads % d == 0 and d <= 64]
        raise KvplanError(f"--tp {tp} does not divide {spec.name}'s {spec.num_attention_heads} attention heads; "
                          f"valid: {', '.join(map(str, divisors))}")
    if not spec.is_mla and spec.num_kv_heads % tp and tp % spec.num_kv_heads:
        raise KvplanError(f"--tp {tp} must divide or be a multiple of {spec.name}'s {spec.num_kv_heads} KV heads")


def bytes_per_block(spec: ModelSpec, block_size: int = DEFAULT_BLOCK_SIZE, kv_cache_dtype: str = "auto",
                    tp: int = 1, pp: int = 1, pp_rank: int | None = None,
                    layer_indices: range | list[int] | None = None) -> int:
    """Bytes of one block on one GPU: one page in every layer of the stage (or of `layer_indices`).

    `pp_rank=None` takes the busiest stage. This is the function the engine's allocator divides
    its KV byte budget by.
    """
    if block_size <= 0:
        raise KvplanError(f"block size must be positive, got {block_size}")
    validate_parallel(spec, tp, pp)
    kv_dtype = spec.kv_dtype(kv_cache_dtype)
    if layer_indices is None:
        ranks = range(pp) if pp_rank is None else [pp_rank]
        return max(
            sum(_block_bytes(spec.layers[i], block_size, kv_dtype, tp) for i in pp_layer_range(spec.num_layers, pp, r))
            for r in ranks
        )
    return sum(_block_bytes(spec.layers[i], block_size, kv_dtype, tp) for i in layer_indices)


def _block_bytes(layer: Layer, block_size: int, kv_dtype: KvDtype, tp: int) -> int:
    """One block of one layer: a page of each of its paged caches."""
    return sum(c.page_bytes(block_size, kv_dtype, tp) for c in layer.paged)


# --- fixed per-request state (Mamba / Gated-DeltaNet) -----------------------------------------------
def state_bytes(layer: Layer, model_dtype: str, tp: int = 1) -> int:
    """One request's recurrent state in one layer on one TP rank, unpadded (vLLM MambaSpec page)."""
    return layer.state.bytes_per_request(model_dtype, tp) if layer.state is not None else 0


def attention_bytes_per_token(spec: ModelSpec, kv_dtype: KvDtype, tp: int = 1) -> int:
    """vLLM's `attn_page_size_1_token`: one token of one attention layer on one rank (0 if none)."""
    return max((layer_bytes_per_token(layer, kv_dtype, tp) for layer in spec.layers), default=0)


def unified_block_size(spec: ModelSpec, block_size: int, kv_dtype: KvDtype, tp: int = 1) -> int:
    """The attention block size vLLM serves a hybrid attention + state model with: the smallest
    multiple of the kernel alignment (max(16, --block-size); MLA 64) whose attention page holds one
    request's state; `block_size` itself for models without both kinds, or when it is already enough.
    DeepSeek-V3.2's sparse MLA always runs 64-token blocks (FlashMLASparse)."""
    if spec.has_sparse_indexer:
        return SPARSE_MLA_BLOCK_SIZE
    multiple = max((c.block_multiple for layer in spec.layers for c in layer.caches), default=1)
    if multiple > 1:  # DeepSeek-V4: whole compressed entries per block (an assumption: spec.warnings says so)
        return multiple * -(-block_size // multiple)
    attn_1 = attention_bytes_per_token(spec, kv_dtype, tp)
    state = max((state_bytes(layer, spec.dtype, tp) for layer in spec.layers), default=0)
    if not attn_1 or not state:
        return block_size
    align = max(MLA_KERNEL_BLOCK_ALIGNMENT if spec.is_mla else KERNEL_BLOCK_ALIGNMENT, block_size)
    needed = align * -(-state // (align * attn_1))
    return max(block_size, needed)


def state_page_bytes(spec: ModelSpec, block_size: int, kv_dtype: KvDtype, tp: int = 1) -> int:
    """What vLLM reserves for one state layer of one request (one page): the state padded to one
    attention page at the unified block size, or the bare state in an attention-free model."""
    state = max((state_bytes(layer, spec.dtype, tp) for layer in spec.layers), default=0)
    if not state:
        return 0
    attn_1 = attention_bytes_per_token(spec, kv_dtype, tp)
    return max(state, unified_block_size(spec, block_size, kv_dtype, tp) * attn_1)


@dataclass(frozen=True)
class KvLayout:
    """A model's KV cache under one dtype, block size and parallel layout.

    `block_size` is the one vLLM serves with (`unified_block_size`: raised for hybrid state
    models); `state_copies` is how many state pages vLLM keeps per state layer and request (1;
    2 with prefix caching's "align" mode, vLLM 0.28's default for hybrids)."""

    spec: ModelSpec
    kv_dtype: KvDtype
    block_size: int = DEFAULT_BLOCK_SIZE
    tp: int = 1
    pp: int = 1
    state_copies: int = 1

    @classmethod
    def of(cls, spec: ModelSpec, kv_cache_dtype: str = "auto", block_size: int = DEFAULT_BLOCK_SIZE,
           tp: int = 1, pp: int = 1, state_copies: int = 1) -> KvLayout:
        if block_size <= 0:
            raise KvplanError(f"--block-size must be positive, got {block_size}")
        validate_parallel(spec, tp, pp)
        kv_dtype = spec.kv_dtype(kv_cache_dtype)
        return cls(spec, kv_dtype, unified_block_size(spec, block_size, kv_dtype, tp), tp, pp, state_copies)

    # --- fixed per request ---------------------------------------------------------------------
    def state_bytes_per_request(self) -> int:
        """Whole model: one request's recurrent state in every state layer (unpadded, one copy)."""
        return sum(state_bytes(layer, self.spec.dtype) for layer in self.spec.layers)

    def state_bytes_per_request_per_gpu(self) -> int:
        """Per GPU (busiest stage, one TP rank): one request's state, unpadded, one copy."""
        return max(sum(state_bytes(layer, self.spec.dtype, self.tp) for layer in self.stage_layers(r))
                   for r in range(self.pp))

    def _state_charged(self, layers: list[Layer], tp: int) -> int:
        """What vLLM reserves for one request's state in `layers`: padded pages x copies."""
        n_state = sum(1 for layer in layers if layer.state is not None)
        if not n_state:
            return 0
        return self.state_copies * n_state * state_page_bytes(self.spec, self.block_size, self.kv_dtype, tp)

    # --- per token -------------------------------------------------------------------------
    def stage_layers(self, pp_rank: int) -> list[Layer]:
        return [self.spec.layers[i] for i in pp_layer_range(self.spec.num_layers, self.pp, pp_rank)]

    def bytes_per_token_per_gpu(self) -> int:
        """Per GPU: busiest stage, one TP rank, every layer holding the token (no window cap)."""
        return max(token_bytes(self.stage_layers(r), self.kv_dtype, self.tp) for r in range(self.pp))

    def bytes_per_token(self) -> int:
        """Whole model: one replica of every layer's cache (the same at any TP and PP)."""
        return token_bytes(self.spec.layers, self.kv_dtype, 1)

    def bytes_per_token_all_gpus(self) -> int:
        """All GPUs together: every TP rank of every stage, replicated heads and MLA latents included."""
        return self.tp * token_bytes(self.spec.layers, self.kv_dtype, self.tp)

    def bytes_per_block(self) -> int:
        """One block on the busiest GPU (see `bytes_per_block`)."""
        return bytes_per_block(self.spec, self.block_size, self.kv_dtype.name, self.tp, self.pp)

    # --- per request -----------------------------------------------------------------------
    def _layers_bytes(self, layers: list[Layer], tokens: int, paged: bool, tp: int) -> int:
        """KV of one request in `layers` plus its fixed state (paged: vLLM's padded state pages;
        exact: the bare state)."""
        if paged:
            total = self._state_charged(layers, tp)
        else:
            total = self.state_copies * sum(state_bytes(layer, self.spec.dtype, tp) for layer in layers)
        for layer in layers:
            for cache in layer.paged:
                total += cache.request_bytes(tokens, self.block_size, self.kv_dtype, tp, paged=paged)
        return total

    def request_bytes(self, tokens: int, *, paged: bool = True) -> int:
        """Whole model, one request of `tokens` (paged: rounded up to blocks; else exact), its fixed
        state and encoder tokens included."""
        return self._layers_bytes(list(self.spec.layers), tokens, paged, 1)

    def request_bytes_per_gpu(self, tokens: int, *, paged: bool = True) -> int:
        """Per GPU (busiest stage, one TP rank), one request of `tokens`."""
        return max(self._layers_bytes(self.stage_layers(r), tokens, paged, self.tp) for r in range(self.pp))

    def request_bytes_all_full(self, tokens: int) -> int:
        """Whole model, as a calculator that ignores sliding windows would say (exact tokens; a
        calculator that also counted state layers as attention would say more)."""
        return tokens * self.bytes_per_token() + self.state_copies * self.state_bytes_per_request()

    def contiguous_request_bytes(self, max_model_len: int) -> int:
        """Traditional preallocation: every request reserves `max_model_len` tokens up front."""
        return self.request_bytes(max_model_len, paged=True)

    # --- per batch -------------------------------------------------------------------------
    def _prefix_saving(self, layers: list[Layer], tokens: int, concurrency: int, prefix_tokens: int,
                       tp: int) -> int:
        if prefix_tokens <= 0 or concurrency <= 1:
            return 0
        shared_blocks = min(prefix_tokens, tokens) // self.block_size
        # a window that already slid has dropped the prefix blocks; fixed caches share nothing
        saved = sum(shared_blocks * self.block_size * c.entry_bytes(self.kv_dtype, tp)
                    for layer in layers for c in layer.paged if c.shares_prefix(tokens))
        return (concurrency - 1) * saved

    def shared_prefix_saving_bytes(self, tokens: int, concurrency: int, prefix_tokens: int) -> int:
        """Whole model: bytes saved when `concurrency` requests share a `prefix_tokens` prefix (only
        full blocks are shared; a sliding layer shares only while the request still fits in its window)."""
        return self._prefix_saving(list(self.spec.layers), tokens, concurrency, prefix_tokens, 1)

    def batch_bytes(self, tokens: int, concurrency: int, *, prefix_tokens: int = 0) -> int:
        """Whole model, `concurrency` paged requests of `tokens` each."""
        return concurrency * self.request_bytes(tokens) - self.shared_prefix_saving_bytes(
            tokens, concurrency, prefix_tokens
        )

    def batch_bytes_per_gpu(self, tokens: int, concurrency: int, *, prefix_tokens: int = 0) -> int:
        """Per GPU (busiest stage, one TP rank): `concurrency` paged requests, a shared prefix counted once."""
        return max(concurrency * self._layers_bytes(self.stage_layers(r), tokens, True, self.tp)
                   - self._prefix_saving(self.stage_layers(r), tokens, concurrency, prefix_tokens, self.tp)
                   for r in range(self.pp))

    def max_concurrency(self, tokens: int, kv_budget_bytes_per_gpu: int, *, prefix_tokens: int = 0) -> int:
        """Largest N whose paged KV (with a shared prefix, if any) fits the per-GPU budget."""
        per = self.request_bytes_per_gpu(tokens)
        if not per:
            return 0
        # upper bound: every request after the first costs at least its unshared part
        hi = kv_budget_bytes_per_gpu // max(1, per - per * min(prefix_tokens, tokens) // tokens) + 1
        return largest_fitting(0, hi, lambda n: self.batch_bytes_per_gpu(tokens, n, prefix_tokens=prefix_tokens)
                               <= kv_budget_bytes_per_gpu)

    def max_tokens(self, concurrency: int, kv_budget_bytes_per_gpu: int, limit: int) -> int:
        """Longest context (a multiple of block_size, at most `limit`) whose N requests fit."""
        return largest_fitting(
            0, limit, lambda t: concurrency * self.request_bytes_per_gpu(t) <= kv_budget_bytes_per_gpu
        )
