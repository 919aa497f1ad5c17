"""The prediction half: cost-model fitting and the scheduler simulation (no model forward)."""
import random

import pytest

from kvplan.perf.cost_models import step_cost
from kvplan.perf.step_cost import StepShape
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import load_gpu
from kvplan.stress.cpu_cost import LinearCostModel
from kvplan.stress.prediction import load_cost_model
from kvplan.stress.scenario_loader import load_scenario
from kvplan.stress.simulate import simulate_engine
from kvplan.workload.request import Request

UNIT = LinearCostModel(1e-3, 0.0, 0.0, 0.0, 0.0)


def _requests(n, prompt=(16, 300), output=(8, 64), gap_s=None, seed=0):
    rng = random.Random(seed)
    return [Request.of_ids(tuple(rng.randrange(3, 2000) for _ in range(rng.randint(*prompt))), rng.randint(*output),
                           None if gap_s is None else i * gap_s, request_id=str(i)) for i in range(n)]


def _run(reqs, **kw):
    args = dict(num_gpu_blocks=256, bytes_per_block=32768, block_size=16, max_model_len=1024, max_num_seqs=64,
                max_num_batched_tokens=512, cost_model=UNIT)
    args.update(kw)
    return simulate_engine(reqs, **args)


def test_fit_recovers_known_coefficients():
    rng = random.Random(1)
    shapes, secs = [], []
    for _ in range(300):
        ctx = [rng.randint(0, 800) for _ in range(rng.randint(1, 16))]
        new = [rng.choice([1, 1, 1, 32, 128]) for _ in ctx]
        s = StepShape.from_counts(ctx, new)
        shapes.append(s)
        secs.append(0.002 + 2e-5 * s.num_tokens + 1e-4 * s.num_seqs + 3e-7 * s.context_tokens)
    fit = LinearCostModel.fit(shapes, secs)
    assert fit.intercept_s == pytest.approx(0.002, rel=1e-6)
    assert fit.per_token_s == pytest.approx(2e-5, rel=1e-6)
    assert fit.per_seq_s == pytest.approx(1e-4, rel=1e-6)
    assert fit.per_context_token_s == pytest.approx(3e-7, rel=1e-6)
    assert fit.per_attention_pair_s == pytest.approx(0.0, abs=1e-15)
    assert fit.r2 > 0.999


def test_fit_never_returns_negative_costs():
    shapes = [StepShape.from_counts([c], [1]) for c in range(1, 60)]
    secs = [0.01 - 1e-5 * s.context_tokens for s in shapes]  # time falling with context: unphysical
    fit = LinearCostModel.fit(shapes, secs)
    assert min(fit.intercept_s, fit.per_token_s, fit.per_seq_s, fit.per_context_token_s, fit.per_attention_pair_s) >= 0


def test_calibration_file_round_trip(tmp_path):
    m = LinearCostModel(1e-3, 2e-5, 3e-4, 1e-7, 1e-10, model="tiny-llama", num_samples=10, r2=0.9)
    m.save(tmp_path / "c.yaml")
    assert LinearCostModel.load(tmp_path / "c.yaml") == m


def test_gpu_stress_times_steps_with_the_predict_cost_model():
    """A GPU stress run's prediction uses `kvplan predict`'s step cost (the one factory): the same
    seconds for the same batch."""
    scenario = load_scenario("ci-smoke")
    cost, how = load_cost_model(scenario, device_name="NVIDIA H100 80GB HBM3")
    args = EngineArgs.from_flags(gpu=load_gpu("h100"), dtype=scenario.engine.compute_dtype(),
                                 kv_cache_dtype=scenario.kv_cache_dtype_name())
    predict_cost = step_cost(scenario.model_spec(), args)
    decode = StepShape.from_counts([1000] * 8, [1] * 8, sampled=8)
    assert cost is not None and "--perf-model roofline" in how
    assert cost.step_s(decode) == predict_cost.step_s(decode)
    prefill = StepShape.from_counts([0], [8192], sampled=1)
    assert cost.step_s(prefill) == predict_cost.step_s(prefill) > cost.step_s(decode)


def test_all_requests_finish_with_exact_output_lengths():
    reqs = _requests(40)
    sim = _run(reqs)
    assert len(sim.records) == 40
    by_id = {r.request_id: r for r in sim.records}
    for req in reqs:
        rec = by_id[req.request_id]
        assert rec.output_tokens == req.output_tokens == len(rec.token_times_s)
        assert list(rec.token_times_s) == sorted(rec.token_times_s)


def test_contiguous_reserves_max_model_len():
    reqs = _requests(40)
    paged, contiguous = _run(reqs), _run(reqs, allocator="contiguous")
    assert contiguous.max_running == 256 // 64  # 1024 / 16 = 64 blocks per request
    assert paged.max_running > 2 * contiguous.max_running
    assert contiguous.num_preemptions == 0


def test_small_pool_preempts_and_still_finishes():
    sim = _run(_requests(24, prompt=(200, 400), output=(200, 400)), num_gpu_blocks=80)
    assert sim.num_preemptions > 0 and sim.first_preemption_step is not None
    assert len(sim.records) == 24
    assert sim.peak_kv_bytes == 80 * 32768


def test_closed_loop_keeps_concurrency():
    sim = _run(_requests(30), concurrency=5)
    assert sim.max_running == 5 and len(sim.records) == 30


def test_open_loop_waits_for_arrivals():
    sim = _run(_requests(5, gap_s=10.0))
    firsts = sorted(r.first_token_s for r in sim.records)
    assert all(f >= 10.0 * i for i, f in enumerate(firsts))


def test_nvml_sampler_degrades_without_a_driver():
    """No NVIDIA driver here: the sampler records why and samples nothing, instead of failing the run."""
    import torch

    from kvplan.stress.memory import NvmlSampler, rss_bytes

    sampler = NvmlSampler(interval_s=0.01).start()
    sampler.stop()
    if torch.cuda.is_available():
        assert sampler.error is None and sampler.samples
    else:
        assert sampler.samples == [] and sampler.peak_bytes is None and sampler.error.startswith("NVML unavailable")
    assert rss_bytes() > 0
