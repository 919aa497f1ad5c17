"""Greedy outputs equal transformers' own `generate`, token for token, under every engine mode."""
from __future__ import annotations

import pytest
from engine_helpers import FAMILIES, MAX_TOKENS, hf_greedy, make_prompts, reference, tiny_model

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams

MAX_MODEL_LEN = 512


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0)


def run(
    name: str, config: EngineConfig, prompts: list[list[int]], max_tokens=MAX_TOKENS
) -> tuple[LLMEngine, list[list[int]]]:
    engine = LLMEngine(tiny_model(name), config)
    outputs = engine.generate(prompts, [greedy(n) for n in max_tokens])
    bm = engine.block_manager
    bm.check_invariants([])
    assert bm.num_used_blocks == 0  # everything released
    return engine, outputs


@pytest.mark.parametrize("name", FAMILIES)
def test_greedy_equals_transformers(name: str) -> None:
    prompts, expected = reference(name)
    _, outputs = run(name, EngineConfig(max_model_len=MAX_MODEL_LEN, kv_cache_memory_bytes=32 << 20), prompts)
    assert outputs == expected


def test_forced_preemption_by_recompute(llama_reference) -> None:
    prompts, expected = llama_reference
    # 40 blocks = 640 tokens for ~2,100 tokens of requests: the scheduler must preempt and recompute
    engine, outputs = run("tiny-llama", EngineConfig(max_model_len=MAX_MODEL_LEN, num_gpu_blocks_override=40), prompts)
    assert outputs == expected
    assert engine.stats.total_preemptions > 0


def test_swap_preemption(llama_reference) -> None:
    prompts, expected = llama_reference
    engine = LLMEngine(tiny_model("tiny-llama"), EngineConfig(max_model_len=MAX_MODEL_LEN, num_gpu_blocks_override=40,
                                                              swap_space_bytes=64 * 32768))
    swaps = 0
    ids = [engine.add_request(p, greedy(n)) for p, n in zip(prompts, MAX_TOKENS)]
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = list(out.output_token_ids)
        swaps += engine.stats.num_swapped_out
        engine.block_manager.check_invariants(engine.scheduler.running + list(engine.scheduler.swapped))
    assert [done[i] for i in ids] == expected
    assert swaps > 0 and engine.block_manager.num_free_cpu_blocks == engine.kv_cache.num_cpu_blocks


def test_chunked_prefill(llama_reference) -> None:
    prompts, expected = llama_reference
    engine, outputs = run("tiny-llama", EngineConfig(max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=48,
                                                     kv_cache_memory_bytes=32 << 20), prompts)
    assert outputs == expected


def test_contiguous_allocator(llama_reference) -> None:
    prompts, expected = llama_reference
    engine, outputs = run("tiny-llama", EngineConfig(max_model_len=MAX_MODEL_LEN, allocator="contiguous",
                                                     num_gpu_blocks_override=128), prompts)
    assert outputs == expected  # 128 blocks hold only 4 reservations of 32: requests queue, none is preempted


def test_prefix_caching_shared_prefix() -> None:
    shared = make_prompts([100], seed=7)[0]
    tails = make_prompts([5, 40, 17, 64, 1, 33], seed=8)
    prompts = [shared + t for t in tails] + [shared[:48]]  # the last one is all prefix (block-aligned)
    max_tokens = [12] * len(prompts)
    expected = hf_greedy(tiny_model("tiny-qwen2"), prompts, max_tokens)
    config = EngineConfig(max_model_len=MAX_MODEL_LEN, enable_prefix_caching=True, kv_cache_memory_bytes=16 << 20)
    engine = LLMEngine(tiny_model("tiny-qwen2"), config)
    first = engine.generate(prompts[:1], greedy(12))  # warms the cache
    rest = engine.generate(prompts[1:], [greedy(n) for n in max_tokens[1:]])
    assert first + rest == expected
    assert engine.stats.total_prefix_hit_tokens >= 96 * (len(prompts) - 2) + 32
    engine.block_manager.check_invariants([])
    assert engine.block_manager.num_cached_blocks > 0


def test_prefix_caching_under_preemption(llama_reference) -> None:
    prompts, expected = llama_reference
    config = EngineConfig(max_model_len=MAX_MODEL_LEN, num_gpu_blocks_override=40, enable_prefix_caching=True,
                          max_num_batched_tokens=64)
    engine, outputs = run("tiny-llama", config, prompts)
    assert outputs == expected
    assert engine.stats.total_preemptions > 0
