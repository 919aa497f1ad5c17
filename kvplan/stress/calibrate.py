"""`kvplan calibrate`: time real engine steps on this machine and fit the per-step cost model.

A fixed grid of batches (decode batch sizes x context lengths, and prefill chunks of several
sizes) runs through the engine; each step's shape (from `StepProbe`) and wall time feed a
non-negative least-squares fit (`LinearCostModel.fit`). The fit is stored as a YAML file in the
user's data folder (`catalog_files.user_dir()`) and `kvplan stress` uses it to predict latencies.
"""
from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kvplan.files import child_path
from kvplan.spec.catalog_files import bundled_dir, user_dir
from kvplan.stress.cost import LinearCostModel

WARMUP_STEPS = 6


def calibration_path(name: str, device: str, root: Path | None = None) -> Path:
    """Where `kvplan calibrate` writes `NAME-DEVICE.yaml` (NAME: a scenario or a model): the
    user's data folder, never the bundled files."""
    return child_path(root or user_dir() / "calibration", f"{name}-{device.split(':')[0]}.yaml")


def find_calibration(name: str, device: str) -> Path | None:
    """The user's calibration for NAME on DEVICE, else the bundled one, else None."""
    for root in (user_dir() / "calibration", bundled_dir() / "calibration"):
        path = calibration_path(name, device, root)
        if path.exists():
            return path
    return None


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


def calibrate(model: str, config: object | None = None, *, seed: int = 0, engine: object | None = None, device: str = "cpu",
              mix: list[tuple[list[int], int]] | None = None,
              on_progress: Callable[[int, int], None] | None = None) -> LinearCostModel:
    """Time the grid (and, when given, a replay of `mix`: (prompt ids, output tokens) pairs drawn
    from the scenario) on `model` under `config` (an `EngineConfig`; default: a 512 MiB CPU pool,
    max_model_len 4096), or on a ready `engine`; fit step seconds; return the fit (not saved).

    Calibrate with the settings and the request mix you will stress: the pool, the limits and how
    uneven the batched contexts are all change step times (uneven decodes pad attention)."""
    from kvplan.engine import EngineConfig, LLMEngine, SamplingParams
    from kvplan.stress.step_probe import StepProbe

    if engine is None:
        config = config or EngineConfig(kv_cache_memory_bytes=512 * 2**20, max_model_len=4096, max_num_batched_tokens=2048,
                                        device=device)  # refused here when CUDA is asked for and missing
        engine = LLMEngine.from_profile(model, config, seed=seed)
    config = engine.config  # type: ignore[attr-defined]
    probe = StepProbe(engine)
    rng = np.random.default_rng(seed)
    vocab = engine.vocab_size  # type: ignore[attr-defined]
    shapes, seconds = [], []
    rounds = _grid(engine.max_model_len, config.max_num_batched_tokens, config.max_num_seqs,  # type: ignore[attr-defined]
                   engine.num_gpu_blocks * config.block_size)  # type: ignore[attr-defined]
    levels = [c for c in (4, 16, config.max_num_seqs) if c <= config.max_num_seqs] if mix else []
    total = len(rounds) + len(levels)

    def drain() -> None:
        while engine.has_unfinished_requests():  # type: ignore[attr-defined]
            engine.step()  # type: ignore[attr-defined]
            shapes.append(probe.last)
            seconds.append(engine.stats.step_time_s)  # type: ignore[attr-defined]

    for i, (batch, prompt, output) in enumerate(rounds):
        for _ in range(batch):
            ids = rng.integers(3, vocab, size=prompt).tolist()
            engine.add_request(ids, SamplingParams(max_tokens=output, ignore_eos=True, temperature=0.0))  # type: ignore[attr-defined]
        drain()
        if on_progress:
            on_progress(i + 1, total)
    if mix:  # closed loops over the scenario's own requests: realistic, uneven batches
        per_level = max(1, len(mix) // len(levels))
        for j, level in enumerate(levels):
            todo = list(mix[j * per_level:(j + 1) * per_level])
            while todo or engine.has_unfinished_requests():  # type: ignore[attr-defined]
                while todo and engine.num_unfinished_requests < level:  # type: ignore[attr-defined]
                    ids, out = todo.pop(0)
                    engine.add_request(ids, SamplingParams(max_tokens=out, ignore_eos=True, temperature=0.0))  # type: ignore[attr-defined]
                engine.step()  # type: ignore[attr-defined]
                shapes.append(probe.last)
                seconds.append(engine.stats.step_time_s)  # type: ignore[attr-defined]
            if on_progress:
                on_progress(len(rounds) + j + 1, total)
    device = str(config.device)
    keep = slice(WARMUP_STEPS, None)  # first steps pay one-off costs (allocator, kernels' first use)
    return LinearCostModel.fit(shapes[keep], seconds[keep], model=model, device=device.split(":")[0],
                               host=platform.node())


def calibrate_scenario(scenario: object, on_progress: Callable[[int, int], None] | None = None) -> LinearCostModel:
    """Calibrate on a fresh engine with the scenario's model and settings, replaying (up to 96 of)
    its own requests. A fresh engine keeps the replay out of the stress run's prefix cache."""
    from kvplan.stress.targets.engine_target import build_engine
    from kvplan.stress.workload import generate_requests

    engine = build_engine(scenario)  # type: ignore[arg-type]
    cap = min(scenario.num_requests or 96, 96)  # type: ignore[attr-defined]
    mix = [(list(r.prompt_token_ids), r.output_tokens)
           for r in generate_requests(scenario, vocab_size=engine.vocab_size, max_requests=cap)]  # type: ignore[arg-type,attr-defined]
    return calibrate(scenario.model.name, engine=engine, mix=mix, on_progress=on_progress)  # type: ignore[attr-defined]
