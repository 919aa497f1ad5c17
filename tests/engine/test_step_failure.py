"""A step that raises for one request fails that request alone: the others of the same batch get the
tokens they would have got, the culprit's blocks are freed, and the engine keeps serving."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import MAX_TOKENS, tiny_model

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
from kvplan.engine.isolation import EngineDeadError

POISON_TOKEN = 0  # the reference prompts draw ids from 3 up, and their greedy outputs hold no 0 (checked below)
CONFIGS = {
    "big-pool": EngineConfig(max_model_len=512, kv_cache_memory_bytes=32 << 20),
    "recompute": EngineConfig(max_model_len=512, num_gpu_blocks_override=40),
    "swap": EngineConfig(max_model_len=512, num_gpu_blocks_override=40, swap_space_bytes=64 * 32768),
}


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0)


def poison_forward(engine: LLMEngine) -> torch.utils.hooks.RemovableHandle:
    """The model raises for any forward whose input holds the poison token."""
    def hook(_module, _args, kwargs):
        if (kwargs["input_ids"] == POISON_TOKEN).any():
            raise RuntimeError("poisoned input")
    return engine.model.register_forward_pre_hook(hook, with_kwargs=True)


def poison_sampler(engine: LLMEngine, poison: SamplingParams) -> None:
    """The sampler raises for any batch holding a row with the `poison` params (by identity)."""
    real = engine.runner.sampler

    class Poisoned:
        generator = real.generator

        def __call__(self, logits, params, generators):
            if any(p is poison for p in params):
                raise ValueError("poisoned sampling")
            return real(logits, params, generators)

    engine.runner.sampler = Poisoned()


def drive(engine: LLMEngine) -> dict[str, object]:
    """Step to the end, checking the pool after every step; -> request id -> finished output."""
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            assert out.request_id not in done, f"{out.request_id} got output after it finished"
            if out.finished:
                done[out.request_id] = out
        s = engine.scheduler
        engine.block_manager.check_invariants(list(s.running) + list(s.swapped) + list(s.waiting))
    return done


@pytest.mark.parametrize("where", ["forward", "sampler"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_a_poisoned_request_fails_alone(llama_reference, where: str, config_name: str) -> None:
    prompts, expected = llama_reference
    assert not any(POISON_TOKEN in p for p in prompts) and not any(POISON_TOKEN in e for e in expected)
    engine = LLMEngine(tiny_model("tiny-llama"), CONFIGS[config_name])
    poison_params = SamplingParams(max_tokens=20, ignore_eos=True, temperature=0.0)
    handle = poison_forward(engine) if where == "forward" else None
    if where == "sampler":
        poison_sampler(engine, poison_params)
    try:
        ids = [engine.add_request(p, greedy(n)) for p, n in zip(prompts[:8], MAX_TOKENS[:8])]
        bad_prompt = [5, 6, POISON_TOKEN, 7] * 10 if where == "forward" else [5, 6, 7, 8] * 10
        bad = engine.add_request(bad_prompt, poison_params, request_id="poison")
        ids += [engine.add_request(p, greedy(n)) for p, n in zip(prompts[8:], MAX_TOKENS[8:])]
        done = drive(engine)
    finally:
        if handle is not None:
            handle.remove()
    assert done[bad].finish_reason == "error" and "poisoned" in done[bad].error
    assert done[bad].output_token_ids == ()
    assert [list(done[i].output_token_ids) for i in ids] == expected  # the innocents of its batches are untouched
    assert all(done[i].error is None and done[i].finish_reason == "length" for i in ids)
    assert engine.num_failed_requests == 1
    assert engine.block_manager.num_used_blocks == 0 and engine.num_unfinished_requests == 0
    if config_name == "swap":
        assert engine.block_manager.num_free_cpu_blocks == engine.kv_cache.num_cpu_blocks
    # and it keeps serving
    assert engine.generate([prompts[0]], greedy(MAX_TOKENS[0])) == [expected[0]]


def test_a_batch_wide_failure_retries_everyone_with_the_same_draws(llama_reference) -> None:
    """A failure of the whole batch that no single request causes (raised once, for a batch of more
    than one): every request is run again alone, and seeded sampling draws what it would have drawn."""
    prompts, _ = llama_reference
    params = [SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.8, seed=i) for i, n in enumerate(MAX_TOKENS)]

    def run(fail_once: bool) -> list[list[int]]:
        engine = LLMEngine(tiny_model("tiny-llama"), EngineConfig(max_model_len=512, kv_cache_memory_bytes=32 << 20))
        fired = []

        def hook(_module, _args, kwargs):
            if fail_once and not fired and engine.stats is not None and engine.stats.step >= 3:
                fired.append(True)
                raise RuntimeError("transient")
        handle = engine.model.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            ids = [engine.add_request(p, sp) for p, sp in zip(prompts, params)]
            done = drive(engine)
        finally:
            handle.remove()
        assert fired == ([True] if fail_once else []) and engine.num_failed_requests == 0
        assert engine.block_manager.num_used_blocks == 0
        return [list(done[i].output_token_ids) for i in ids]

    assert run(fail_once=True) == run(fail_once=False)


def test_a_scheduler_failure_is_fatal() -> None:
    """Nothing to blame: the queues may be half-updated, so the engine says it is dead."""
    engine = LLMEngine(tiny_model("tiny-llama"), EngineConfig(max_model_len=512, kv_cache_memory_bytes=8 << 20))
    engine.add_request([5, 6, 7], greedy(4))

    def broken() -> None:
        raise IndexError("boom")
    engine.scheduler.schedule = broken
    with pytest.raises(EngineDeadError, match="scheduler failed: IndexError: boom"):
        engine.step()
