"""`kvplan calibrate`: time real engine steps on this machine and fit the per-step cost model.

A fixed grid of batches (decode batch sizes x context lengths, and prefill chunks of several
sizes) runs through the engine; each step's shape (from `StepProbe`) and wall time feed a
non-negative least-squares fit (`LinearCostModel.fit`). The fit is stored as a YAML file under
`profiles/calibration/` and `kvplan stress` uses it to predict latencies.
"""
from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kvplan.plan.cost import LinearCostModel

WARMUP_STEPS = 6


def calibration_path(model: str, device: str, root: Path | None = None) -> Path:
    from kvplan.spec.profiles import profiles_dir

    return (root or profiles_dir() / "calibration") / f"{model}-{device.split(':')[0]}.yaml"


def _grid(max_len_tokens: int, max_batched_tokens: int) -> list[tuple[int, int, int]]:
    """(concurrent requests, prompt tokens, output tokens) rounds covering decode and prefill."""
    rounds = []
    for prompt in (16, 128, 512, 1536):
        for batch in (1, 4, 12, 32):
            if prompt + 24 < max_len_tokens:
                rounds.append((batch, prompt, 24))
    rounds.append((2, min(3 * max_batched_tokens // 2, max_len_tokens - 40), 8))  # chunked prefill
    return rounds


def calibrate(model: str, *, device: str = "cpu", kv_cache_memory_bytes: int = 512 * 2**20, max_model_len: int = 4096,
              max_num_batched_tokens: int = 2048, seed: int = 0,
              on_progress: Callable[[int, int], None] | None = None) -> LinearCostModel:
    """Run the grid on `model` and fit step seconds; returns the fitted model (not saved)."""
    from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
    from kvplan.stress.step_probe import StepProbe

    config = EngineConfig(kv_cache_memory_bytes=kv_cache_memory_bytes, max_model_len=max_model_len,
                          max_num_batched_tokens=max_num_batched_tokens, device=device, max_num_seqs=256)
    engine = LLMEngine.from_profile(model, config, seed=seed)
    probe = StepProbe(engine)
    rng = np.random.default_rng(seed)
    vocab = engine.vocab_size
    shapes, seconds = [], []
    rounds = _grid(max_model_len, max_num_batched_tokens)
    for i, (batch, prompt, output) in enumerate(rounds):
        for _ in range(batch):
            ids = rng.integers(3, vocab, size=prompt).tolist()
            engine.add_request(ids, SamplingParams(max_tokens=output, ignore_eos=True, temperature=0.0))
        while engine.has_unfinished_requests():
            engine.step()
            shapes.append(probe.last)
            seconds.append(engine.stats.step_time_s)
        if on_progress:
            on_progress(i + 1, len(rounds))
    keep = slice(WARMUP_STEPS, None)  # first steps pay one-off costs (allocator, kernels' first use)
    return LinearCostModel.fit(shapes[keep], seconds[keep], model=model, device=device.split(":")[0],
                               host=platform.node())
