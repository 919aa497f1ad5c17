"""LLMEngine's public API: construction, validation, abort, stats, timestamps, sampling."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import MAX_TOKENS, make_prompts, reference, tiny_model

from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
from kvplan.errors import KvplanError

SMALL = dict(max_model_len=512, kv_cache_memory_bytes=8 << 20)


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(block_size=0), "block_size"), (dict(max_num_seqs=-1), "max_num_seqs"), (dict(allocator="buddy"), "allocator"),
    (dict(kv_cache_dtype="fp7"), "fp7"), (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (dict(device="tpu"), "device"), (dict(swap_space_bytes=-1), "swap_space_bytes"),
    (dict(kv_cache_memory_bytes=0), "kv_cache_memory_bytes"), (dict(kv_cache_dtype="int4"), "int4"),
])
def test_config_errors_name_the_bad_value(kwargs: dict, needle: str) -> None:
    with pytest.raises(KvplanError, match=needle):
        EngineConfig(**kwargs)


def test_engine_errors() -> None:
    model = tiny_model("tiny-llama")
    with pytest.raises(KvplanError, match="max_model_len"):
        LLMEngine(model, EngineConfig(max_model_len=4096, num_gpu_blocks_override=10))
    with pytest.raises(KvplanError, match="max_position_embeddings"):
        LLMEngine(model, EngineConfig(max_model_len=10**6))
    engine = LLMEngine(model, EngineConfig(**SMALL))
    with pytest.raises(KvplanError, match="max_model_len"):
        engine.add_request([5] * 512)
    with pytest.raises(KvplanError, match="token ids"):
        engine.add_request([5, 4096])
    engine.add_request([5], request_id="a")
    with pytest.raises(KvplanError, match="already in use"):
        engine.add_request([5], request_id="a")


def test_from_profile_and_from_pretrained(tmp_path, llama_reference) -> None:
    prompts, expected = llama_reference
    engine = LLMEngine.from_profile("tiny-llama", EngineConfig(**SMALL), seed=0)
    assert engine.generate(prompts[:4], [greedy(n) for n in MAX_TOKENS[:4]]) == expected[:4]
    tiny_model("tiny-llama").save_pretrained(tmp_path)
    loaded = LLMEngine.from_pretrained(tmp_path, EngineConfig(**SMALL))
    assert loaded.generate(prompts[:4], [greedy(n) for n in MAX_TOKENS[:4]]) == expected[:4]
    assert loaded.num_gpu_blocks == engine.num_gpu_blocks == (8 << 20) // engine.bytes_per_block


def test_stats_timestamps_and_limits(llama_reference) -> None:
    prompts, expected = llama_reference
    config = EngineConfig(max_model_len=512, num_gpu_blocks_override=60, max_num_seqs=5, max_num_batched_tokens=128)
    engine = LLMEngine(tiny_model("tiny-llama"), config)
    ids = [engine.add_request(p, greedy(n)) for p, n in zip(prompts, MAX_TOKENS)]
    finished = {}
    while engine.has_unfinished_requests():
        outs = engine.step()
        st = engine.stats
        assert st.num_running <= 5 and st.num_scheduled_tokens <= 128
        assert st.num_blocks_used + st.num_blocks_free == st.num_blocks_total == 60
        assert st.kv_bytes_in_use == st.num_blocks_used * engine.bytes_per_block
        assert st.num_active_tokens <= st.num_blocks_used * 16
        assert st.num_generated_tokens == len(outs) and st.step_time_s > 0
        finished.update({o.request_id: o for o in outs if o.finished})
    assert [list(finished[i].output_token_ids) for i in ids] == expected
    for out in finished.values():
        times = out.token_times_s
        assert len(times) == out.num_output_tokens and list(times) == sorted(times)
        assert out.arrival_time_s <= out.first_scheduled_time_s <= times[0]
        assert out.finish_reason == "length"
    assert engine.stats.num_blocks_used == 0


def test_abort_frees_everything(llama_reference) -> None:
    prompts, _ = llama_reference
    engine = LLMEngine(tiny_model("tiny-llama"), EngineConfig(max_model_len=512, num_gpu_blocks_override=40,
                                                              enable_prefix_caching=True, swap_space_bytes=16 * 32768))
    ids = [engine.add_request(p, greedy(40)) for p in prompts]
    for _ in range(6):
        engine.step()
    running = engine.scheduler.running[0].request_id
    waiting = engine.scheduler.waiting[-1].request_id
    assert engine.abort(running) and engine.abort(waiting)
    assert not engine.abort(running) and not engine.abort("nope")
    finished = set()
    while engine.has_unfinished_requests():
        finished |= {o.request_id for o in engine.step() if o.finished}
        if engine.stats.step == 20 and engine.scheduler.swapped:
            assert engine.abort(engine.scheduler.swapped[0].request_id)
    assert running not in finished and waiting not in finished and len(finished) >= len(ids) - 3
    engine.block_manager.check_invariants([])
    assert engine.block_manager.num_used_blocks == 0


def test_stop_conditions() -> None:
    engine = LLMEngine(tiny_model("tiny-llama"), EngineConfig(**SMALL))
    prompt = make_prompts([20], seed=3)[0]
    first = engine.generate([prompt], greedy(1))[0][0]
    out = engine.generate([prompt], SamplingParams(max_tokens=10, temperature=0.0, stop_token_ids=(first,)))
    assert out == [[first]]
    long = make_prompts([500], seed=4)[0]
    assert len(engine.generate([long], greedy(100))[0]) == 12  # stops at max_model_len=512


def test_seeded_sampling_is_reproducible() -> None:
    model = tiny_model("tiny-qwen2")
    prompts = make_prompts([10, 30, 50], seed=5)
    params = [SamplingParams(max_tokens=16, temperature=0.9, top_p=0.95, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    a = LLMEngine(model, EngineConfig(**SMALL)).generate(prompts, params)
    b = LLMEngine(model, EngineConfig(**SMALL)).generate(prompts, params)
    assert a == b and all(0 <= t < 2048 for seq in a for t in seq)
    c = LLMEngine(model, EngineConfig(**SMALL, seed=1)).generate(
        prompts, SamplingParams(max_tokens=16, temperature=0.9, ignore_eos=True)
    )
    assert c != a
    nucleus = LLMEngine(model, EngineConfig(**SMALL)).generate(
        prompts, SamplingParams(max_tokens=8, temperature=1.0, top_p=1e-6, ignore_eos=True)
    )
    assert nucleus == LLMEngine(model, EngineConfig(**SMALL)).generate(prompts, greedy(8))  # top_p -> 0 is greedy


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kv_dtype", ["auto", "fp8"])
def test_cuda_engine_agrees_with_transformers(kv_dtype: str) -> None:
    prompts, expected = reference("tiny-llama")  # computed on CPU in float32
    engine = LLMEngine(tiny_model("tiny-llama"), EngineConfig(max_model_len=512, kv_cache_memory_bytes=64 << 20,
                                                              device="cuda", dtype="float32", kv_cache_dtype=kv_dtype,
                                                              swap_space_bytes=8 << 20))
    try:
        out = engine.generate(prompts, [greedy(n) for n in MAX_TOKENS])
    finally:
        tiny_model("tiny-llama").to("cpu")
    agree = sum(a == b for o, x in zip(out, expected) for a, b in zip(o, x)) / sum(map(len, expected))
    print(f"CUDA engine ({kv_dtype}) vs transformers on CPU: token agreement {agree:.3f}")
    assert agree >= 0.9


@pytest.mark.parametrize("temperature", [1e-40, 5e-324, 1e-6])
def test_a_tiny_temperature_samples_at_the_floor_not_a_crash(temperature: float) -> None:
    """Dividing logits by 1e-40 gives inf/nan and made `torch.multinomial` fail the whole step;
    as vLLM, such a request samples at temperature 0.01 (same seed, same tokens)."""
    model = tiny_model("tiny-llama")
    prompts = [[5, 6, 7, 8]]
    tiny = LLMEngine(model, EngineConfig(**SMALL)).generate(
        prompts, SamplingParams(max_tokens=6, temperature=temperature, seed=3, ignore_eos=True)
    )
    floor = LLMEngine(model, EngineConfig(**SMALL)).generate(
        prompts, SamplingParams(max_tokens=6, temperature=0.01, seed=3, ignore_eos=True)
    )
    assert tiny == floor and len(tiny[0]) == 6


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=float("nan")),
        dict(temperature=float("inf")),
        dict(top_p=float("nan")),
        dict(seed=-1),
        dict(seed=2**64),
        dict(stop_token_ids=(1.5,)),
        dict(temperature=True),
    ],
)
def test_sampling_params_refuse_non_finite_and_odd_values(kwargs: dict) -> None:
    with pytest.raises(KvplanError):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("change,needle", [({"model_type": "no-such-model"}, "no-such-model"),
                                           ({"rms_norm_eps": "x"}, "rms_norm_eps"),
                                           ({"hidden_act": "nope"}, "nope")])
def test_a_config_transformers_refuses_is_one_line(tmp_path, change, needle) -> None:
    """Keys kvplan does not read pass its schema; transformers checks them when the engine builds
    the model, and what it refuses is one ConfigError line naming the file, not a traceback."""
    import json

    from kvplan.errors import ConfigError
    from kvplan.spec.profiles import model_profile

    (tmp_path / "config.json").write_text(json.dumps({**model_profile("tiny-llama")["config"], **change}))
    with pytest.raises(ConfigError) as info:
        LLMEngine.from_model(str(tmp_path))
    message = str(info.value)
    assert "config.json" in message and needle in message and "\n" not in message and len(message) < 600


def test_construction_runs_one_full_batch_forward_before_the_first_step() -> None:
    """As vLLM's profile run: one forward of min(max_num_batched_tokens, max_model_len) tokens, with
    the engine's own threads, so the first real batch does not pay the allocator's first touch."""
    model = tiny_model("tiny-llama")
    seen: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append((kwargs["input_ids"].shape[1], torch.get_num_threads())), with_kwargs=True)
    try:
        LLMEngine(model, EngineConfig(**SMALL, max_num_batched_tokens=300, num_threads=1))
        assert seen == [(300, 1)]
        seen.clear()
        LLMEngine(model, EngineConfig(**SMALL))  # the default budget (2048) is above max_model_len
        assert [n for n, _ in seen] == [512]
    finally:
        hook.remove()
