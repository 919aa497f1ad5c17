"""Paged attention against a dense float64 reference: decodes, fresh prefills, chunks with
cached context, sliding windows, quantized pools, scattered block tables; CPU and CUDA."""
from __future__ import annotations

import pytest
import torch

from kvplan.engine import attention
from kvplan.engine.attention import AttentionMetadata, torch_paged_attention
from kvplan.engine.kv_cache import KVCache
from kvplan.spec.profiles import load_model

H, KVH, D, BS = 8, 2, 32, 16
# (cached tokens before this step, new tokens): decodes, a fresh prefill, chunks with context
CASES = [(0, 37), (40, 1), (15, 1), (100, 1), (16, 20), (70, 33), (0, 1), (31, 1)]


def dense_reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, ctx: int, scale: float,
                    window: int | None) -> torch.Tensor:
    """q [n, H, D] at positions ctx-n..ctx-1; keys/values [ctx, kvh, D] -> [n, H, D], in float64."""
    n = q.shape[0]
    k = keys.double().repeat_interleave(H // KVH, dim=1)  # [ctx, H, D]
    v = values.double().repeat_interleave(H // KVH, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) * scale
    q_pos = torch.arange(ctx - n, ctx).unsqueeze(1)
    k_pos = torch.arange(ctx).unsqueeze(0)
    keep = k_pos <= q_pos
    if window is not None:
        keep &= k_pos > q_pos - window
    scores = scores.masked_fill(~keep, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def run_case(kv_dtype: str, window: int | None, device: str, impl, fresh_prefill_from_inputs: bool = True) -> None:
    """`fresh_prefill_from_inputs`: the torch path attends a first chunk to its unquantized K/V;
    the fused kernel reads every key from the pool."""
    spec = load_model("tiny-llama")  # 2 KV heads of 32
    cache = KVCache(spec, 64, BS, kv_dtype, torch.float32, device)
    g = torch.Generator().manual_seed(0)
    free = torch.randperm(64, generator=g).tolist()  # scattered, out-of-order blocks
    tables, slots, qs, ks, vs, expected = [], [], [], [], [], []
    layer, scale = 2, D ** -0.5
    for cached, new in CASES:
        ctx = cached + new
        table = [free.pop() for _ in range(-(-ctx // BS))]
        keys, values = torch.randn(ctx, KVH, D, generator=g), torch.randn(ctx, KVH, D, generator=g)
        seq_slots = torch.tensor([table[p // BS] * BS + p % BS for p in range(ctx)])
        cache.write(layer, seq_slots[:cached].to(device), keys[:cached].to(device), values[:cached].to(device))
        if kv_dtype != "float32":  # the reference sees what the pool holds (quantized), as attention does
            cache.write(layer, seq_slots.to(device), keys.to(device), values.to(device))
            gk, gv = cache.gather(layer, torch.tensor(table, device=device))
            if cached == 0 and new > 1 and fresh_prefill_from_inputs:
                gk, gv = keys.view(1, ctx, KVH, D), values.view(1, ctx, KVH, D)
            keys_ref, values_ref = gk.reshape(-1, KVH, D)[:ctx].cpu(), gv.reshape(-1, KVH, D)[:ctx].cpu()
        else:
            keys_ref, values_ref = keys, values
        q = torch.randn(new, H, D, generator=g)
        expected.append(dense_reference(q, keys_ref, values_ref, ctx, scale, window))
        tables.append(table)
        slots.extend(seq_slots[cached:].tolist())
        qs.append(q)
        ks.append(keys[cached:])
        vs.append(values[cached:])
    meta = AttentionMetadata.build(
        tables, [n for _, n in CASES], [c + n for c, n in CASES], slots, BS, torch.device(device)
    )
    q, k, v = (torch.cat(x).to(device) for x in (qs, ks, vs))
    cache.write(layer, meta.slot_mapping, k, v)
    out = impl(q, k, v, cache, layer, meta, scale, window).cpu()
    tol = 1e-5 if device == "cpu" else 2e-2  # CUDA: tf32 tensor-core dots (the interpreter on CPU is exact)
    torch.testing.assert_close(out.double(), torch.cat(expected), atol=tol, rtol=tol)


@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "fp8", "int8"])
@pytest.mark.parametrize("window", [None, 24])
def test_torch_paged_attention_matches_dense(kv_dtype: str, window: int | None) -> None:
    run_case(kv_dtype, window, "cpu", torch_paged_attention)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "fp8", "int8"])
@pytest.mark.parametrize("window", [None, 24])
def test_cuda_paged_attention_matches_dense(kv_dtype: str, window: int | None) -> None:
    run_case(kv_dtype, window, "cuda", torch_paged_attention)
    if attention.triton_paged_attention is None:
        pytest.skip("Triton is not installed: only the torch path on CUDA was checked")

    def fused(q, k, v, cache, layer, meta, scale, window):
        return attention.triton_paged_attention(q, cache, layer, meta, scale, window)

    run_case(kv_dtype, window, "cuda", fused, fresh_prefill_from_inputs=False)
