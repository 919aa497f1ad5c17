"""`kvplan calibrate`: time real engine steps on this machine and fit the per-step cost model.

A fixed grid of batches (decode batch sizes x context lengths, and prefill chunks of several
sizes) runs through the engine; each step's shape (from `StepProbe`) and wall time feed a
non-negative least-squares fit (`LinearCostModel.fit`). The fit is stored as a YAML file in the
user's data folder (`catalog_files.user_dir()`) and `kvplan stress` uses it to predict latencies.

Each step's run-queue wait (time a neighbour held the CPU, `run_queue.py`) is taken out of its
time before the fit, so a busy machine scatters the fit less. Between steps the reference kernel
is timed, as in a stress run (`machine_speed.py`), and stored with the machine's facts (CPU model, cores, torch,
threads): a
later run measures how much slower its machine is than this one, and a run elsewhere is flagged.
A fit whose R² is below `MIN_R2` is refused (`fit_problem` says why) unless forced: a machine
busy enough to scatter step times that much cannot be calibrated on.
"""
from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kvplan.files import child_path
from kvplan.results.machine_facts import machine_facts
from kvplan.spec.catalog_files import bundled_dir, user_dir
from kvplan.stress.cpu_cost import LinearCostModel
from kvplan.stress.machine_speed import ReferenceSampler, ReferenceTiming
from kvplan.stress.run_queue import RunQueueClock

if TYPE_CHECKING:
    from kvplan.engine.config import EngineConfig
    from kvplan.engine.llm_engine import LLMEngine
    from kvplan.perf.step_cost import StepShape
    from kvplan.stress.scenario import Scenario

WARMUP_STEPS = 6
MIN_R2 = 0.9  # quiet runs here fit 0.96-0.99; a busy neighbour scattered one to 0.01


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


def _grid(
    max_len_tokens: int, max_batched_tokens: int, max_num_seqs: int, pool_tokens: int
) -> list[tuple[int, int, int]]:
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


class _Timer:
    """Steps timed with their shapes, the reference kernel between them, and the CPU waits."""

    def __init__(self, engine: LLMEngine) -> None:
        from kvplan.engine.reference_kernel import ReferenceKernel
        from kvplan.stress.step_probe import StepProbe

        self.engine, self.probe = engine, StepProbe(engine)
        self.shapes: list[StepShape] = []
        self.seconds: list[float] = []
        self.reference = ReferenceSampler(ReferenceKernel(str(engine.config.device)).time_s)
        self.queue = RunQueueClock()
        self.wall_s, self.wait_s = 0.0, 0.0

    def step(self) -> None:
        wait0, start = self.queue.wait_s(), time.perf_counter()
        self.engine.step()
        self.wall_s += time.perf_counter() - start
        wait1 = self.queue.wait_s()
        waited = (wait1 - wait0) if wait0 is not None and wait1 is not None else 0.0
        self.wait_s += waited
        shape, stats = self.probe.last, self.engine.stats
        assert shape is not None and stats is not None, "the probe and the engine record every step"
        self.shapes.append(shape)
        # the step as it would have run with a CPU to itself: the model predicts the engine, and a
        # stress run measures its own machine's waits (machine_speed.reference_slowdown)
        self.seconds.append(max(1e-6, stats.step_time_s - waited))
        self.reference.after_step(stats.step_time_s)

    def machine(self) -> dict[str, object]:
        """What a stress run compares itself with: the reference kernel, CPU waits, facts."""
        self.reference.top_up()
        self.queue.close()
        timing = ReferenceTiming(self.reference.times_s, self.reference.cpu_s, self.wall_s, self.wait_s).figures({})
        threads = getattr(getattr(self.engine, "runner", None), "threads", None)
        return {"reference_kernel_ms": timing.get("reference_kernel_ms"),
                "reference_kernel_cpu_ms": timing.get("reference_kernel_cpu_ms"),
                "cpu_wait_share": timing.get("cpu_wait_share"), "threads": getattr(threads, "threads", None),
                "machine": machine_facts().to_dict()}


def fit_problem(fit: LinearCostModel, min_r2: float = MIN_R2) -> str | None:
    """Why the fit should not be stored, or None."""
    if fit.r2 >= min_r2:
        return None
    spread = (f", step times {fit.residual_p10_pct:+.0f}% to {fit.residual_p90_pct:+.0f}% off the fit (p10-p90)"
              if fit.residual_p10_pct is not None and fit.residual_p90_pct is not None else "")
    busy = (f"; the engine waited for a CPU {100 * fit.cpu_wait_share:.0f}% of its step time: another process was "
            "using the cores" if fit.cpu_wait_share and fit.cpu_wait_share > 0.1 else "")
    return f"fit R² {fit.r2:.3f} is below {min_r2}{spread}{busy}"


def calibrate(model: str, config: EngineConfig | None = None, *, seed: int = 0, engine: LLMEngine | None = None,
              mix: list[tuple[list[int], int]] | None = None,
              on_progress: Callable[[int, int], None] | None = None) -> LinearCostModel:
    """Time the grid (and, when given, a replay of `mix`: (prompt ids, output tokens) pairs drawn
    from the scenario) on `model` under `config` (an `EngineConfig`; default: a 512 MiB CPU pool,
    max_model_len 4096), or on a ready `engine`; fit step seconds; return the fit (not saved).

    Calibrate with the settings and the request mix you will stress: the pool, the limits and how
    uneven the batched contexts are all change step times (uneven decodes pad attention)."""
    from kvplan.engine import EngineConfig, LLMEngine, SamplingParams

    if engine is None:
        config = config or EngineConfig(
            kv_cache_memory_bytes=512 * 2**20, max_model_len=4096, max_num_batched_tokens=2048, device="cpu"
        )
        engine = LLMEngine.from_profile(model, config, seed=seed)
    config = engine.config
    timer = _Timer(engine)
    rng = np.random.default_rng(seed)
    vocab = engine.vocab_size
    rounds = _grid(engine.max_model_len, config.max_num_batched_tokens, config.max_num_seqs,
                   engine.num_gpu_blocks * config.block_size)
    levels = [c for c in (4, 16, config.max_num_seqs) if c <= config.max_num_seqs] if mix else []
    total = len(rounds) + len(levels)

    def drain() -> None:
        while engine.has_unfinished_requests():
            timer.step()

    for i, (batch, prompt, output) in enumerate(rounds):
        for _ in range(batch):
            ids = rng.integers(3, vocab, size=prompt).tolist()
            engine.add_request(ids, SamplingParams(max_tokens=output, ignore_eos=True, temperature=0.0))
        drain()
        if on_progress:
            on_progress(i + 1, total)
    if mix:  # closed loops over the scenario's own requests: realistic, uneven batches
        per_level = max(1, len(mix) // len(levels))
        for j, level in enumerate(levels):
            todo = list(mix[j * per_level:(j + 1) * per_level])
            while todo or engine.has_unfinished_requests():
                while todo and engine.num_unfinished_requests < level:
                    ids, out = todo.pop(0)
                    engine.add_request(ids, SamplingParams(max_tokens=out, ignore_eos=True, temperature=0.0))
                timer.step()
            if on_progress:
                on_progress(len(rounds) + j + 1, total)
    device = str(config.device)
    keep = slice(WARMUP_STEPS, None)  # first steps pay one-off costs (allocator, kernels' first use)
    return LinearCostModel.fit(timer.shapes[keep], timer.seconds[keep], model=model,
                               device=device.split(":")[0], host=platform.node(), **timer.machine())


def calibrate_scenario(scenario: Scenario, on_progress: Callable[[int, int], None] | None = None,
                       threads: int | None = None) -> LinearCostModel:
    """Calibrate on a fresh engine with the scenario's model and settings, replaying (up to 96 of)
    its own requests. A fresh engine keeps the replay out of the stress run's prefix cache.
    `threads` overrides the scenario's engine.num_threads."""
    from dataclasses import replace

    from kvplan.stress.targets.engine_target import build_engine

    if threads is not None:
        scenario = scenario.model_copy(update={"engine": replace(scenario.engine, num_threads=threads)})
    engine = build_engine(scenario)
    cap = min(scenario.num_requests or 96, 96)
    mix = [(list(r.token_ids), r.output_tokens) for r in scenario.requests(engine.vocab_size, max_requests=cap)]
    return calibrate(scenario.model.name, engine=engine, mix=mix, on_progress=on_progress)
