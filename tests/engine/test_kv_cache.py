"""The KV pool: block counts equal the planner's, bytes equal blocks x bytes_per_block,
quantized layouts shrink memory as predicted and stay close to the model's outputs."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import FAMILIES, MAX_TOKENS, reference, tiny_model

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
from kvplan.engine.kv_cache import KVCache, num_blocks_for_budget
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.kv import bytes_per_block
from kvplan.spec.profiles import load_model

MODELS = ("tiny-llama", "tiny-qwen3", "llama-3.2-1b", "qwen2.5-0.5b", "mistral-7b-v0.1", "qwen3-0.6b")
KV_DTYPES = ("float32", "bfloat16", "float16", "fp8", "int8")
BUDGETS = (3_000_001, 7_340_033, 24 << 20)


def pool_bytes(cache: KVCache) -> int:
    return sum(t.nbytes for t in (cache.kv, cache.scales) if t is not None)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_pool_blocks_equal_planner(model: str, kv_dtype: str) -> None:
    spec = load_model(model)
    for budget in BUDGETS:
        blocks = num_blocks_for_budget(spec, budget, 16, kv_dtype)
        assert blocks == budget // bytes_per_block(spec, 16, kv_dtype)
        plan = plan_capacity(spec, EngineArgs(kv_cache_memory_bytes=budget, kv_cache_dtype=kv_dtype, max_model_len=16))
        assert blocks == plan.num_gpu_blocks
        if blocks:
            cache = KVCache(spec, blocks, 16, kv_dtype, torch.float32)
            assert pool_bytes(cache) == cache.nbytes == blocks * bytes_per_block(spec, 16, kv_dtype)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("kv_dtype", ("auto", "fp8", "int8"))
def test_engine_blocks_equal_planner(name: str, kv_dtype: str) -> None:
    budget = 5_000_000
    engine = LLMEngine(
        tiny_model(name),
        EngineConfig(kv_cache_memory_bytes=budget, kv_cache_dtype=kv_dtype, max_model_len=256, block_size=32),
    )
    resolved = "float32" if kv_dtype == "auto" else kv_dtype  # the engine runs float32; the planner's auto is bf16
    assert engine.kv_cache_dtype == resolved
    plan = plan_capacity(
        load_model(name),
        EngineArgs(kv_cache_memory_bytes=budget, kv_cache_dtype=resolved, block_size=32, max_model_len=256),
    )
    assert engine.num_gpu_blocks == plan.num_gpu_blocks
    assert engine.kv_cache_bytes == pool_bytes(engine.kv_cache) == plan.num_gpu_blocks * plan.block_bytes


def test_quantized_pools_halve_and_quarter_memory() -> None:
    spec = load_model("tiny-llama")  # head_dim 32
    sizes = {dt: KVCache(spec, 64, 16, dt, torch.float32).nbytes for dt in ("float32", "bfloat16", "fp8", "int8")}
    assert sizes["bfloat16"] * 2 == sizes["float32"]
    assert sizes["fp8"] * 4 == sizes["float32"]
    assert sizes["int8"] == sizes["fp8"] * (32 + 2) // 32  # plus a float16 scale per token and head, for K and V
    budget = 8 << 20  # at equal memory, 4x the blocks
    assert num_blocks_for_budget(spec, budget, 16, "fp8") == 4 * num_blocks_for_budget(spec, budget, 16, "float32")


# (relative, absolute) error bounds: half an ulp of the mantissa; fp8's subnormals below 2**-6
# are spaced 2**-9; int8 is relative to the (token, head) absmax.
@pytest.mark.parametrize("kv_dtype,rel,abs_", [("float32", 0.0, 0.0), ("bfloat16", 2**-8, 0.0), ("fp8", 2**-4, 2**-10),
                                               ("int8", 0.5 / 127 + 2**-11, 0.0)])
def test_write_gather_round_trip(kv_dtype: str, rel: float, abs_: float) -> None:
    spec = load_model("tiny-llama")
    cache = KVCache(spec, 8, 16, kv_dtype, torch.float32)
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(20, 2, 32, generator=g), torch.randn(20, 2, 32, generator=g)
    slots = torch.tensor([3 * 16 + i for i in range(16)] + [5 * 16 + i for i in range(4)])
    cache.write(1, slots, k, v)
    gk, gv = cache.gather(1, torch.tensor([3, 5]))
    got_k, got_v = gk.reshape(-1, 2, 32)[:20], gv.reshape(-1, 2, 32)[:20]
    for got, want in ((got_k, k), (got_v, v)):
        scale = want.abs().amax(-1, keepdim=True) if kv_dtype == "int8" else want.abs()
        assert ((got - want).abs() <= rel * scale + abs_ + 1e-7).all()
    assert not cache.kv[0].view(torch.uint8 if kv_dtype == "fp8" else cache.kv.dtype).any()  # other layers untouched


# Floors measured on these random-weight models (their logits are nearly flat, so a small K/V error
# flips near-ties). Qwen3 normalizes K (q/k norm) to O(1) values, where fp8's 3 mantissa bits bite most.
AGREEMENT_FLOORS = {("tiny-qwen3", "fp8"): 0.6, ("tiny-qwen3", "int8"): 0.85}


@pytest.mark.parametrize("name", FAMILIES)
def test_quantized_kv_token_agreement(name: str) -> None:
    prompts, expected = reference(name)
    total = sum(len(x) for x in expected)
    for kv_dtype in ("fp8", "int8"):
        engine = LLMEngine(
            tiny_model(name), EngineConfig(max_model_len=512, kv_cache_memory_bytes=16 << 20, kv_cache_dtype=kv_dtype)
        )
        out = engine.generate(
            prompts, [SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0) for n in MAX_TOKENS]
        )
        agree = sum(a == b for o, x in zip(out, expected) for a, b in zip(o, x)) / total
        print(
            f"{name} {kv_dtype}: token agreement {agree:.3f}, exact sequences "
            f"{sum(o == x for o, x in zip(out, expected))}/16"
        )
        assert agree >= AGREEMENT_FLOORS.get((name, kv_dtype), 0.9)
