"""The GPU cost model's physics: what each input does to a step's time."""
from __future__ import annotations

from dataclasses import replace

import pytest
from step_shapes import at

from kvplan.perf.gpu_cost import Coefficients, GpuStepModel, link_bytes_per_s
from kvplan.spec.gpu import load_gpu
from kvplan.spec.model import spec_from_config
from kvplan.spec.profiles import load_model

C = Coefficients()



def model(name: str = "llama-3.1-8b-instruct", gpu: str = "h100-sxm-80gb", **kw) -> GpuStepModel:
    return GpuStepModel.build(load_model(name), load_gpu(gpu), coefficients=C, **kw)


def test_interconnect_parsed_per_direction() -> None:
    assert link_bytes_per_s(load_gpu("h100-sxm-80gb")) == pytest.approx(450e9)  # NVLink 900 GB/s both ways
    assert link_bytes_per_s(load_gpu("l40s")) == pytest.approx(32e9)  # PCIe Gen4 x16


def test_decode_is_bandwidth_bound_and_prefill_compute_bound() -> None:
    m = model()
    decode = m.step_s(at(1, 1, 0, 1000, 1000, 1))
    weights_s = m.dense_read_bytes / (m.bandwidth_bytes_per_s * C.hbm_efficiency)
    assert decode > weights_s  # at least the weights once
    prefill = m.step_s(at(8192, 1, 8192, 8192, 8192 * 4096, 1))
    gemm_s = m.linear_flops_per_token * 8192 / (m.peak_flops_per_s * C.gemm_efficiency)
    assert prefill > gemm_s and prefill > 5 * decode


def test_tensor_parallel_splits_weights_and_adds_allreduce() -> None:
    one, two = model(), model(tp=2)
    assert two.dense_read_bytes == pytest.approx(one.dense_read_bytes / 2, rel=0.01)
    assert one.num_allreduces == 0 and two.num_allreduces == 2 * 32
    assert two.step_s(at(1, 1, 0, 100, 100, 1)) < one.step_s(at(1, 1, 0, 100, 100, 1))


def test_fp8_weights_halve_reads_and_use_fp8_tensor_cores() -> None:
    bf16, fp8 = model(), model(quantization="fp8")
    assert fp8.peak_flops_per_s == pytest.approx(2 * bf16.peak_flops_per_s, rel=0.01)
    assert fp8.dense_read_bytes < 0.7 * bf16.dense_read_bytes
    assert model(kv_cache_dtype="fp8").kv_bytes_per_token == bf16.kv_bytes_per_token / 2


def test_moe_touches_more_experts_as_the_batch_grows() -> None:
    m = model("qwen3-30b-a3b")
    assert m.experts == 128 and m.experts_per_token == 8
    t1, t8, t512 = (m.step_s(at(n, n, 0, n, n, n)) for n in (1, 8, 512))
    assert t1 < t8 < t512
    dense_like = replace(m, experts=0)  # all experts read every step
    assert dense_like.step_s(at(1, 1, 0, 1, 1, 1)) > t1


def test_mla_cache_is_latent_and_eager_adds_launches() -> None:
    m = model("deepseek-v3", "h200-sxm-141gb", tp=8)
    assert m.kv_bytes_per_token == pytest.approx(
        61 * 576 * 2, rel=0.01
    )  # one 576-wide latent per layer, not split by TP
    eager = model(enforce_eager=True)
    assert eager.step_s(at(4, 4, 0, 400, 400, 4)) == pytest.approx(model().step_s(at(4, 4, 0, 400, 400, 4))
                                                               + 32 * C.eager_layer_overhead_s)


def test_legacy_vllm_pays_its_own_overhead() -> None:
    old, new = model(vllm_version="0.5.4"), model(vllm_version="0.11.0")
    assert old.legacy and not new.legacy
    c = Coefficients(legacy_step_overhead_s=0.01, step_overhead_s=0.001)
    assert replace(old, coefficients=c).step_s(at(1, 1, 0, 1, 1, 1)) - replace(new, coefficients=c).step_s(
        at(1, 1, 0, 1, 1, 1)
    ) == pytest.approx(0.009, rel=0.05)


def test_no_per_request_floor_sets_the_step_at_high_batch() -> None:
    """Issue 25: a fitted per-running-request floor once gave Llama-8B on one H100 and Llama-70B on
    8 A100s the same step time at 200 requests. The step is the GPU's work plus a fixed CPU cost:
    with the work taken away, 512 decodes cost what 1 does."""
    small = GpuStepModel.build(load_model("llama-3.1-8b"), load_gpu("h100"))
    big = GpuStepModel.build(load_model("llama-3.1-70b"), load_gpu("a100-sxm4-80gb"), tp=8)
    ctx = 200 * 1500
    a, b = small.step_s(at(200, 200, 0, ctx, ctx, 200)), big.step_s(at(200, 200, 0, ctx, ctx, 200))
    assert abs(a - b) / min(a, b) > 0.2
    idle = replace(small, dense_read_bytes=0.0, linear_flops_per_token=0.0, lm_head_flops_per_row=0.0,
                   kv_bytes_per_token=0.0, attention_flops_per_pair=0.0)
    assert idle.step_s(at(512, 512, 0, 0, 0, 512)) == pytest.approx(idle.step_s(at(1, 1, 0, 0, 0, 1)))


def test_a_norm_spanning_the_tp_group_adds_its_all_reduce() -> None:
    """MiniMax-M2 normalizes q and k over all heads (vLLM minimax_m2.py, MiniMaxText01RMSNormTP.forward_qk
    all-reduces their fp32 variances): a third all-reduce per layer under TP; none without TP, and
    a model with per-head norms keeps two."""
    minimax, qwen = load_model("minimax-m2.5"), load_model("qwen3-8b")
    assert minimax.tp_norm_allreduces == minimax.num_layers == 62 and qwen.tp_norm_allreduces == 0
    h100 = load_gpu("h100")
    assert GpuStepModel.build(minimax, h100, tp=4).num_allreduces == 3 * 62
    assert GpuStepModel.build(minimax, h100, tp=1).num_allreduces == 0
    assert GpuStepModel.build(qwen, h100, tp=4).num_allreduces == 2 * qwen.num_layers
    per_head = spec_from_config({**minimax.config, "qk_norm_type": "per_head"}, "minimax-per-head")
    assert per_head.tp_norm_allreduces == 0
    step = [
        GpuStepModel.build(m, h100, tp=4).step_s(at(16, 16, 0, 16 * 1024, 16 * 1024, 16)) for m in (per_head, minimax)
    ]
    assert step[1] > step[0]  # the extra latency shows in a decode step
