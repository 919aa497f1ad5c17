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


def calibration_path(name: str, device: str, root: Path | None = None) -> Path:
    """`profiles/calibration/NAME-DEVICE.yaml`; NAME is a scenario name or a model name."""
    from kvplan.spec.profiles import profiles_dir

    return (root or profiles_dir() / "calibration") / f"{name}-{device.split(':')[0]}.yaml"


def _grid(max_len_tokens: int, max_batched_tokens: int, max_num_seqs: int, pool_tokens: int) -> list[tuple[int, int, int]]:
    """(concurrent requests, prompt tokens, output tokens) rounds covering decode and prefill,
    kept inside the engine's limits so the pool never has to preempt."""
    rounds = []
    for prompt in (16, 128, 512, 1536):
        if prompt + 24 >= max_len_tokens:
            continue
        for batch in (1, 4, 12, 32):
            fit = min(batch, max_num_seqs, pool_tokens // (prompt + 40))
            if fit >= 1 and (fit, prompt, 24) not in rounds:
                rounds.append((fit, prompt, 24))
    chunked = min(3 * max_batched_tokens // 2, max_len_tokens - 40, pool_tokens // 2 - 40)
    if chunked > max_batched_tokens:
        rounds.append((1, chunked, 8))  # a prompt longer than the token budget: chunked prefill
    return rounds


def calibrate(model: str, config: object | None = None, *, seed: int = 0,
              on_progress: Callable[[int, int], None] | None = None) -> LinearCostModel:
    """Run the grid on `model` under `config` (an `EngineConfig`; default: a 512 MiB CPU pool,
    max_model_len 4096) and fit step seconds; returns the fitted model (not saved).
    Calibrate with the settings you will stress: pool size and limits change step times."""
    from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
    from kvplan.stress.step_probe import StepProbe

    config = config or EngineConfig(kv_cache_memory_bytes=512 * 2**20, max_model_len=4096, max_num_batched_tokens=2048)
    engine = LLMEngine.from_profile(model, config, seed=seed)
    probe = StepProbe(engine)
    rng = np.random.default_rng(seed)
    vocab = engine.vocab_size
    shapes, seconds = [], []
    rounds = _grid(engine.max_model_len, config.max_num_batched_tokens, config.max_num_seqs,
                   engine.num_gpu_blocks * config.block_size)
    device = str(config.device)
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
