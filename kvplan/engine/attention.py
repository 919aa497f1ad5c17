"""Paged attention: `AttentionMetadata`, slot writes, and the attention function that
transformers models call through `AttentionInterface` under the name `ATTN_IMPLEMENTATION`.

One forward packs every scheduled sequence into a single row of T tokens (prefill chunks and
decodes alike). For each layer the new K/V are written to their pool slots, then:
- CPU (and CUDA without Triton): decodes are batched by similar length, gathering each
  sequence's blocks with `index_select` into a padded [B, kvh, S, D] and running one masked SDPA
  per group (query heads packed per KV head);
  prefill chunks run one SDPA each (causal, offset by the tokens already computed).
- CUDA with Triton: one fused kernel reads K/V straight from the pool (`triton_attention.py`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from kvplan.engine.kv_cache import KVCache

ATTN_IMPLEMENTATION = "kvplan_paged"

try:  # the fused CUDA path is optional; CPU never needs Triton
    from kvplan.engine.triton_attention import supports as triton_supports
    from kvplan.engine.triton_attention import triton_paged_attention
except Exception:  # ImportError, or a Triton without a usable backend
    triton_paged_attention = triton_supports = None  # type: ignore[assignment]


DECODE_GROUP_FILL = 0.75  # a decode joins a group if it fills >= 75% of the group's padded length


@dataclass(frozen=True)
class DecodeGroup:
    """Decodes of similar length, padded to `num_blocks` blocks and run as one SDPA."""

    rows: torch.Tensor  # [Bg] int64: token row of each decode in the packed batch
    block_ids: torch.Tensor  # [Bg * num_blocks] int64: block tables padded to num_blocks, flattened
    context_lens: torch.Tensor  # [Bg] int64
    num_blocks: int


@dataclass(frozen=True)
class AttentionMetadata:
    """Per-step inputs of paged attention (B sequences, T new tokens in total).

    `context_lens[b]` counts sequence b's tokens once this step's are written (cached + new);
    its `query_lens[b]` new tokens are rows `cu_seqlens_q[b]:cu_seqlens_q[b+1]` of the packed batch.
    """

    slot_mapping: torch.Tensor  # [T] int64: pool slot (block_id * block_size + offset) of each new token
    block_tables: torch.Tensor  # [B, max_blocks] int32, padded with block 0 (masked out)
    context_lens: torch.Tensor  # [B] int32
    cu_seqlens_q: torch.Tensor  # [B+1] int32
    query_lens_host: tuple[int, ...]  # the same on the host, for the per-sequence loop
    query_starts_host: tuple[int, ...]
    context_lens_host: tuple[int, ...]
    max_query_len: int
    block_size: int
    decode_groups: tuple[DecodeGroup, ...]  # decodes (query_len == 1) batched by similar length, torch path
    prefill_seqs: tuple[int, ...]  # indices b with query_len > 1

    @classmethod
    def build(cls, block_tables: list[list[int]], query_lens: list[int], context_lens: list[int], slots: list[int],
              block_size: int, device: torch.device) -> AttentionMetadata:
        max_blocks = max(len(t) for t in block_tables)
        bt = torch.tensor([t + [0] * (max_blocks - len(t)) for t in block_tables], dtype=torch.int32)
        cu = [0]
        for n in query_lens:
            cu.append(cu[-1] + n)
        nblocks = [-(-c // block_size) for c in context_lens]
        decodes = sorted((b for b, n in enumerate(query_lens) if n == 1), key=lambda b: -nblocks[b])
        groups: list[list[int]] = []
        for b in decodes:  # longest first; padding to the group's first keeps the gather within 1/FILL of needed
            if groups and nblocks[b] >= DECODE_GROUP_FILL * nblocks[groups[-1][0]]:
                groups[-1].append(b)
            else:
                groups.append([b])
        return cls(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            block_tables=bt.to(device),
            context_lens=torch.tensor(context_lens, dtype=torch.int32, device=device),
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
            query_lens_host=tuple(query_lens), query_starts_host=tuple(cu[:-1]), context_lens_host=tuple(context_lens),
            max_query_len=max(query_lens), block_size=block_size,
            decode_groups=tuple(DecodeGroup(
                rows=torch.tensor([cu[b] for b in g], dtype=torch.int64, device=device),
                block_ids=bt[g, :nblocks[g[0]]].to(torch.int64).flatten().to(device),
                context_lens=torch.tensor([context_lens[b] for b in g], dtype=torch.int64, device=device),
                num_blocks=nblocks[g[0]]) for g in groups),
            prefill_seqs=tuple(b for b, n in enumerate(query_lens) if n > 1),
        )


def _window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """Boolean [.., q, k]: causal, and within the sliding window when there is one (HF's rule)."""
    mask = k_pos <= q_pos
    if window is not None:
        mask &= k_pos > q_pos - window
    return mask


def torch_paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache, layer: int,
                          meta: AttentionMetadata, scale: float, window: int | None = None) -> torch.Tensor:
    """q [T, H, D], new k/v [T, kvh, D] (already written to the pool) -> attention output [T, H, D]."""
    out = torch.empty_like(q)
    kvh, dim = cache.num_kv_heads, cache.head_dim
    for group in meta.decode_groups:
        bg = group.rows.numel()
        keys, values = cache.gather(layer, group.block_ids)  # [Bg * nb, bs, kvh, D]
        keys = keys.view(bg, -1, kvh, dim).transpose(1, 2)  # [Bg, kvh, S, D]
        values = values.view(bg, -1, kvh, dim).transpose(1, 2)
        ctx_lens = group.context_lens.unsqueeze(1)  # [Bg, 1]
        k_pos = torch.arange(keys.shape[2], device=q.device).unsqueeze(0)
        mask = _window_mask(ctx_lens - 1, k_pos, window).view(bg, 1, 1, -1)  # the query sits at position ctx-1
        # GQA packed: the G query heads of a KV head become G query rows (head h uses KV head h // G),
        # about 2x faster on CPU than enable_gqa for one-token queries.
        qg = q[group.rows].view(bg, kvh, -1, dim)  # [Bg, kvh, G, D]
        o = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask, scale=scale)  # [Bg, kvh, G, D]
        out[group.rows] = o.reshape(bg, -1, dim)
    for b in meta.prefill_seqs:
        start, qlen, ctx = meta.query_starts_host[b], meta.query_lens_host[b], meta.context_lens_host[b]
        if ctx == qlen:  # nothing cached before this chunk: attend to the fresh K/V
            keys, values = k[start:start + qlen], v[start:start + qlen]
        else:
            ids = meta.block_tables[b, :-(-ctx // meta.block_size)].to(torch.int64)
            keys, values = (x.reshape(-1, kvh, dim)[:ctx] for x in cache.gather(layer, ids))
        qs = q[start:start + qlen].transpose(0, 1).unsqueeze(0)  # [1, H, qlen, D]
        ks, vs = keys.transpose(0, 1).unsqueeze(0), values.transpose(0, 1).unsqueeze(0)  # [1, kvh, ctx, D]
        if ctx == qlen and (window is None or window >= ctx):
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=True)
        else:
            q_pos = torch.arange(ctx - qlen, ctx, device=q.device).unsqueeze(1)
            mask = _window_mask(q_pos, torch.arange(ctx, device=q.device).unsqueeze(0), window)
            o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale, enable_gqa=True)
        out[start:start + qlen] = o[0].transpose(0, 1)
    return out


def paged_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                            sliding_window: int | None = None, attn_metadata: AttentionMetadata | None = None,
                            kv_cache: KVCache | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [1, H, T, D], key/value [1, kvh, T, D]
    -> ([1, T, H, D], None). Without engine metadata it defers to transformers' SDPA."""
    if attn_metadata is None or kv_cache is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    layer = int(module.layer_idx)  # type: ignore[arg-type]  # set on every decoder attention module
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    q, k, v = query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1)  # [T, heads, D]
    kv_cache.write(layer, attn_metadata.slot_mapping, k, v)
    if q.is_cuda and triton_paged_attention is not None and triton_supports(kv_cache):
        out = triton_paged_attention(q, kv_cache, layer, attn_metadata, scale, sliding_window)
    else:
        out = torch_paged_attention(q, k, v, kv_cache, layer, attn_metadata, scale, sliding_window)
    return out.unsqueeze(0), None


AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
