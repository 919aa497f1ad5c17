"""The engine's CPU tier really copies K/V: a conversation whose history the GPU pool evicted and
the tier served back generates the same greedy tokens as one that recomputed everything, and the
tier's copies are counted (vLLM 0.19.1's OffloadingConnector: blocks stored as scheduled, a GPU
miss looked up in the tier past the GPU hits)."""
from __future__ import annotations

from engine_helpers import make_prompts, tiny_model

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams

GREEDY = SamplingParams(max_tokens=8, ignore_eos=True, temperature=0.0)


def converse(config: EngineConfig) -> tuple[list[list[int]], LLMEngine]:
    """Turn 1 of A, then a long B that takes every GPU block, then turn 2 of A (its history + reply + more)."""
    engine = LLMEngine(tiny_model("tiny-llama"), config)
    a, b, more = make_prompts((96, 200, 20), seed=5)
    first = engine.generate([a], GREEDY)[0]
    engine.generate([b], GREEDY)
    second = engine.generate([a + list(first) + more], GREEDY)[0]
    return [list(first), list(second)], engine


def test_a_history_loaded_from_the_tier_generates_what_recomputing_it_does() -> None:
    base = dict(max_model_len=256, block_size=16, max_num_batched_tokens=256, enable_prefix_caching=True)
    recomputed, plain = converse(EngineConfig(**base, num_gpu_blocks_override=16))
    loaded, tiered = converse(EngineConfig(**base, num_gpu_blocks_override=16, kv_offloading_bytes=64 * 2**20))
    assert loaded == recomputed
    assert plain.stats is not None and tiered.stats is not None
    # A's turn 1 held blocks 0-6 (6 full prompt blocks, then 7 of its reply's tokens) and freed them
    # last first: the queue is 7..15, 6, 5, 4, 3, 2, 1, 0. B (200 + 7 computed tokens: 13 blocks)
    # takes 7..15 and 6, 5, 4, 3: A's blocks 3-5 lose their hashes, 0-2 keep them. Turn 2 hits 0-2
    # on the GPU (48 tokens) and 3-5 in the tier (48), which stored every full block as scheduled
    assert (tiered.stats.total_prefix_hit_tokens, tiered.stats.total_cpu_hit_tokens) == (48, 48)
    assert (plain.stats.total_prefix_hit_tokens, plain.stats.total_cpu_hit_tokens) == (48, 0)
