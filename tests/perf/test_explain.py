"""`predict --explain` (kvplan.perf.explain): the median request's TTFT cut where the simulation
recorded it, checked on a schedule worked out by hand; and each step cost's components add up to
its step time."""
from __future__ import annotations

import pytest

from kvplan.perf.explain import explain
from kvplan.perf.schedule import simulate
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepShape
from kvplan.workload.request import Request


class TenMs:
    """Every step 10 ms: 7 on the GPU, 3 on the host."""

    def step_s(self, shape: StepShape) -> float:
        return 0.010

    def components_s(self, shape: StepShape) -> dict[str, float]:
        return {"gpu": 0.007, "host": 0.003}


def test_the_median_request_waits_one_step_then_prefills_in_one() -> None:
    """Three 100-token prompts at t = 0, one token each, a budget of 100 tokens a step: request k
    prefills alone in step k and samples at its end, so TTFTs are 10, 20, 30 ms (+ 25 ms outside
    the engine). The median, request 1: 10 ms in the engine's queue (step 0), then one 10 ms step."""
    requests = [Request(0.0, 100, 1) for _ in range(3)]
    config = SchedulerConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=100)
    trace = simulate(requests, config, TenMs())
    found = explain(trace, TenMs(), 0.025, 3)
    assert found is not None and found.request_index == 1 and found.prefill_steps == 1
    parts = list(found.ttft_parts_ms.values())
    assert parts == pytest.approx([25.0, 0.0, 10.0, 10.0])
    assert found.ttft_ms == pytest.approx(sum(parts)) == pytest.approx(45.0)
    assert found.prefill_components_ms == pytest.approx({"gpu": 7.0, "host": 3.0})
    assert found.decode_step is None  # every step held a prefill


def test_prefill_in_chunks_counts_each_step() -> None:
    """One 250-token prompt, 100 tokens a step: chunks 100, 100, 50, first token at the end of the
    third step (30 ms), and its components summed over the three steps."""
    config = SchedulerConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=100)
    trace = simulate([Request(0.0, 250, 3)], config, TenMs())
    found = explain(trace, TenMs(), 0.0, 1)
    assert found is not None and found.prefill_steps == 3
    assert found.ttft_parts_ms["prefill steps (its first chunk to its first token)"] == pytest.approx(30.0)
    assert found.prefill_components_ms == pytest.approx({"gpu": 21.0, "host": 9.0})
    assert found.decode_step is not None and found.decode_step["num_seqs"] == 1


@pytest.mark.parametrize("perf_model", ["roofline", "kernels"])
def test_components_add_up_to_the_step(perf_model: str) -> None:
    from kvplan.perf.cost_models import step_cost
    from kvplan.perf.kernel_tables import kernels_available
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    if perf_model == "kernels" and not kernels_available("h100-sxm-80gb"):
        pytest.skip("the kernels extra (aiconfigurator-core) is not installed")
    for name, tp in (("llama-3.1-8b-instruct", 1), ("qwen3-30b-a3b", 2)):
        spec = load_model(name)
        model = step_cost(spec, EngineArgs.from_flags(gpu=load_gpu("h100"), tensor_parallel_size=tp), None,
                          perf_model)
        for shape in (StepShape.from_counts([0], [2000]), StepShape.from_counts([1000] * 20, [1] * 20),
                      StepShape.from_counts([0, 500, 800], [512, 1, 1])):
            parts = model.components_s(shape)
            assert sum(parts.values()) == pytest.approx(float(model.step_s(shape)), rel=1e-9, abs=1e-12)
            assert all(v >= -1e-12 for v in parts.values()), parts


def test_predict_explain_in_json_and_as_tables() -> None:
    import json

    from typer.testing import CliRunner

    from kvplan.cli import app

    args = ["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--perf-model", "roofline",
            "--random-input-len", "2000", "--random-output-len", "50", "--request-rate", "5", "--num-prompts", "41",
            "--explain"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    found = out["explain"]
    assert sum(found["ttft_parts_ms"].values()) == pytest.approx(found["ttft_ms"])
    assert found["ttft_ms"] == pytest.approx(out["median_ttft_ms"])  # 41 requests: the median is one of them
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "Where the median TTFT goes" in r.stdout and "by component" in r.stdout


def test_plan_says_which_step_cost_it_searched_with() -> None:
    from typer.testing import CliRunner

    from kvplan.cli import app

    args = ["plan", "--model", "llama-3.1-8b-instruct", "--request-rate", "4", "--slo-ttft-ms", "2000",
            "--slo-tpot-ms", "100", "--gpu", "h100", "--num-prompts", "60"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    import json

    assert json.loads(r.stdout)["perf_model"] == "roofline"  # plan's default: hundreds of simulations
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main([*args, "--perf-model", "bogus"])
    assert info.value.code == 2
