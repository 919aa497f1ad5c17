"""Data-parallel MoE replicas in lockstep: hand-counted steps, the decode shortcut against stepping
one at a time, and what lockstep changes in `predict`."""
from __future__ import annotations

import math

import numpy as np
import pytest

from kvplan.perf.lockstep import simulate_lockstep
from kvplan.perf.schedule import simulate
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepShape
from kvplan.workload.datasets.random_dataset import RandomDataset
from kvplan.workload.request import Request


class _ByTokens:
    def step_s(self, shape: StepShape) -> float:
        return 0.001 + 0.0001 * shape.num_tokens + 0.00002 * shape.num_seqs


class _ByContext:
    """A step that also reads its KV cache (works on a stretch's context array too)."""

    def step_s(self, shape: StepShape) -> float:
        return 0.001 + 0.0001 * shape.num_tokens + 1e-7 * shape.context_tokens


by_tokens, by_context = _ByTokens(), _ByContext()


def test_a_prefill_on_one_rank_stalls_the_other_ranks_decodes() -> None:
    """Rank 0 decodes one request; rank 1 gets a 1,000-token prompt at 5 ms. On its own rank 0
    decodes at 1.12 ms a step; in lockstep the step holding rank 1's prefill (101.02 ms) is rank
    0's too, and rank 1's steps are never shorter than rank 0's."""
    cfg = SchedulerConfig(num_gpu_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048)
    alone = simulate([Request(0.0, 10, 20)], cfg, by_tokens)
    r0, r1 = simulate_lockstep([([Request(0.0, 10, 20)], None), ([Request(0.005, 1000, 3)], None)], cfg, by_tokens)
    assert np.allclose(alone.itl_s, 0.00112)
    assert max(r0.itl_s) == pytest.approx(
        0.00112 + (by_tokens.step_s(StepShape(1000, 1, 0, 0)) - by_tokens.step_s(StepShape(1, 1, 0, 0)))
    )  # decode + the prefill's extra
    assert r0.last_token_s[0] > alone.last_token_s[0] + 0.099
    steps0, steps1 = r0.step_end_s, r1.step_end_s
    assert np.array_equal(steps1, steps0[np.isin(steps0, steps1)])  # rank 1's steps end when rank 0's do
    assert len(steps1) < len(steps0)  # rank 1 idles (a dummy batch) once its request is done


@pytest.mark.parametrize("cost", [by_tokens, by_context])
@pytest.mark.parametrize(
    ("workload", "config", "concurrency"),
    [
        (RandomDataset(200, 60, 0.5, 200, 5.0, seed=1), SchedulerConfig(400, 16, 32, 512), None),
        (
            RandomDataset(200, 300, 0.5, 100, math.inf, seed=2),
            SchedulerConfig(300, 16, 32, 512),
            16,
        ),  # preempts, closed loop
        (
            RandomDataset(150, 200, 0.5, 200, 40.0, seed=4),
            SchedulerConfig(150, 16, 64, 512, async_scheduling=True),
            None,
        ),
    ],
)
def test_shared_decode_stretches_change_nothing(
    workload: RandomDataset, config: SchedulerConfig, concurrency: int | None, cost
) -> None:
    """Stretches every rank only decodes run at once (each step the slowest rank's; a rank's costs
    timed ahead and sliced when another rank cuts the stretch): every figure equals stepping one at
    a time."""
    reqs = workload.requests()
    shares = [(reqs[rank::3], None if concurrency is None else concurrency // 3) for rank in range(3)]
    slow = simulate_lockstep(shares, config, cost, frontend_s=0.002, fast=False)
    fast = simulate_lockstep(shares, config, cost, frontend_s=0.002)
    for s, f in zip(slow, fast):
        for name in ("step_end_s", "step_tokens", "first_token_s", "last_token_s", "itl_s", "send_s"):
            assert np.allclose(getattr(s, name), getattr(f, name), rtol=1e-12, atol=1e-12), name
        assert (s.peak_used_blocks, s.num_preemptions) == (f.peak_used_blocks, f.num_preemptions)
    assert sum(t.extras["fast_decode_steps"] for t in fast) > 0


def test_identical_ranks_run_as_one() -> None:
    """Ranks with the same requests step alike: lockstep changes nothing then."""
    reqs = RandomDataset(100, 120, 0.5, 80, 4.0, seed=7).requests()
    cfg = SchedulerConfig(2000, 16, 32, 512)
    alone = simulate(reqs, cfg, by_tokens)
    for t in simulate_lockstep([(reqs, None), (reqs, None)], cfg, by_tokens):
        assert np.allclose(t.last_token_s, alone.last_token_s) and np.allclose(t.itl_s, alone.itl_s)


def test_predict_runs_moe_replicas_in_lockstep_and_dense_ones_apart() -> None:
    """--data-parallel-size on a MoE model: the replicas' decodes wait for each other's prefills,
    so TPOT is at least the independent replicas'; a dense model's replicas stay independent."""
    from kvplan.perf.cost_models import step_cost
    from kvplan.perf.predict import predict, scheduler_config, server_plan, simulate_replicas
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    spec = load_model("qwen3-30b-a3b")
    args = EngineArgs.from_flags(gpu=load_gpu("h100"), data_parallel_size=2, enable_expert_parallel=True)
    reqs = RandomDataset(120, 1000, 0.5, 200, 8.0, seed=3).requests()
    config, model = scheduler_config(server_plan(spec, args)), step_cost(spec, args)
    apart = simulate_replicas(reqs, config, model, 2, None)
    together = simulate_replicas(reqs, config, model, 2, None, lockstep=True)
    tpot = lambda t: float(np.mean((t.last_token_s - t.first_token_s) / (t.output_tokens - 1)))  # noqa: E731
    assert tpot(together) > tpot(apart)
    figures = predict(spec, args, reqs).figures
    assert figures["mean_tpot_ms"] == pytest.approx(tpot(together) * 1e3, rel=1e-9)
