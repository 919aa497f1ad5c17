"""Fused paged attention for CUDA in Triton: reads K/V straight from the pool through the block
table (no gather copy), dequantizes fp8/int8 on the fly, online softmax (flash-attention style).

One program per (sequence, query head, tile of BLOCK_M query tokens); it walks the sequence's
blocks up to the tile's last causal position. Decodes are tiles of one row. Imported only when
Triton is installed (`attention.py` guards the import); CPU never needs it.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvplan.engine.kv_cache import KVCache

QUANT_NONE, QUANT_FP8, QUANT_INT8 = 0, 1, 2


@triton.jit
def _online_softmax_step(s, v, m_i, l_i, acc):
    """Fold one block's masked scores `s` [M, N] and values `v` [N, D] into the running row max
    `m_i`, normaliser `l_i` and output `acc`, rescaling what was summed under the old max."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet stays empty
    p = tl.exp(s - m_safe[:, None])
    alpha = tl.exp(m_i - m_safe)
    return m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None] + tl.dot(p, v)


@triton.jit
def _paged_attention_kernel(
    Q, K, V, KS, VS, Out, BlockTables, ContextLens, CuSeqlensQ,
    sm_scale, fp8_scale,
    stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_sb, stride_ss, stride_sh,
    stride_ot, stride_oh, stride_bt,
    QUERIES_PER_KV: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, QUANT: tl.constexpr, WINDOW: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    tile = tl.program_id(2)
    q_start = tl.load(CuSeqlensQ + seq)
    q_len = tl.load(CuSeqlensQ + seq + 1) - q_start
    if tile * BLOCK_M < q_len:
        ctx = tl.load(ContextLens + seq)
        kv_head = head // QUERIES_PER_KV
        offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_SIZE)
        m_valid = offs_m < q_len
        d_valid = offs_d < HEAD_DIM
        q = tl.load(Q + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                    mask=m_valid[:, None] & d_valid[None, :], other=0.0).to(tl.float32)
        q_pos = ctx - q_len + offs_m  # absolute position of each query row
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        hi = tl.minimum(ctx, ctx - q_len + (tile + 1) * BLOCK_M)  # keys past the tile's last query are masked
        lo = 0
        if WINDOW > 0:
            lo = tl.maximum(0, ctx - q_len + tile * BLOCK_M - WINDOW + 1) // BLOCK_SIZE * BLOCK_SIZE
        for start in range(lo, hi, BLOCK_SIZE):
            block = tl.load(BlockTables + seq * stride_bt + start // BLOCK_SIZE).to(tl.int64)
            pos = start + offs_n
            n_valid = pos < ctx
            kv_off = block * stride_kb + offs_n[:, None] * stride_ks + kv_head * stride_kh + offs_d[None, :]
            kv_mask = n_valid[:, None] & d_valid[None, :]
            k = tl.load(K + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
            v = tl.load(V + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
            if QUANT == 1:
                k = k * fp8_scale
                v = v * fp8_scale
            if QUANT == 2:
                s_off = block * stride_sb + offs_n * stride_ss + kv_head * stride_sh
                k = k * tl.load(KS + s_off, mask=n_valid, other=0.0).to(tl.float32)[:, None]
                v = v * tl.load(VS + s_off, mask=n_valid, other=0.0).to(tl.float32)[:, None]
            s = tl.dot(q, tl.trans(k)) * sm_scale  # [BLOCK_M, BLOCK_SIZE]
            keep = (pos[None, :] <= q_pos[:, None]) & n_valid[None, :]
            if WINDOW > 0:
                keep = keep & (pos[None, :] > q_pos[:, None] - WINDOW)
            m_i, l_i, acc = _online_softmax_step(tl.where(keep, s, float("-inf")), v, m_i, l_i, acc)
        out = acc / l_i[:, None]
        tl.store(Out + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
                 out.to(Out.dtype.element_ty), mask=m_valid[:, None] & d_valid[None, :])


def triton_paged_attention(q: torch.Tensor, cache: KVCache, layer: int, meta, scale: float,
                           window: int | None = None) -> torch.Tensor:
    """q [T, H, D] -> [T, H, D], attending to each sequence's cached K/V (new ones already written)."""
    k_cache, v_cache = cache.kv[layer, 0], cache.kv[layer, 1]  # [N, bs, kvh, D]
    quant = QUANT_NONE
    ks = vs = k_cache  # placeholders when there are no per-token scales
    if cache.scales is not None:
        quant, ks, vs = QUANT_INT8, cache.scales[layer, 0], cache.scales[layer, 1]
    elif cache.storage_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        quant = QUANT_FP8
    q = q.contiguous()
    out = torch.empty_like(q)
    num_seqs, heads = meta.context_lens.numel(), q.shape[1]
    block_m = 64 if meta.max_query_len >= 64 else 16  # tl.dot needs 16 rows; a decode masks 15 of them
    grid = (num_seqs, heads, triton.cdiv(meta.max_query_len, block_m))
    _paged_attention_kernel[grid](
        q, k_cache, v_cache, ks, vs, out, meta.block_tables, meta.context_lens, meta.cu_seqlens_q,
        scale, cache.fp8_scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        ks.stride(0), ks.stride(1), ks.stride(2), out.stride(0), out.stride(1), meta.block_tables.stride(0),
        QUERIES_PER_KV=heads // cache.num_kv_heads, BLOCK_SIZE=cache.block_size, HEAD_DIM=cache.head_dim,
        BLOCK_D=triton.next_power_of_2(cache.head_dim), BLOCK_M=block_m, QUANT=quant, WINDOW=window or 0,
    )
    return out


def supports(cache: KVCache) -> bool:
    """tl.dot needs tiles of at least 16 and power-of-two sizes."""
    bs = cache.block_size
    return bs >= 16 and bs & (bs - 1) == 0 and cache.head_dim >= 16
