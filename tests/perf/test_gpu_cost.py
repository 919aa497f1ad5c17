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


# --- each input of the roofline by hand (the perf mutation run's survivors) -------------------------
def test_a_dense_model_s_step_inputs_by_hand() -> None:
    """Llama-3.1-8B at TP 2 on an H100 SXM (datasheet: 989.4 dense bf16 TFLOPS, 3.35 TB/s, NVLink
    900 GB/s both ways). Per layer: attention 2 x 4,096^2 + 2 x 4,096 x 1,024 = 41,943,040 and MLP
    3 x 4,096 x 14,336 = 176,160,768 parameters; 2 x 4,096 norm weights; 128,256 x 4,096 vocabulary."""
    m = model(tp=2)
    layers_bytes = 2 * (32 * (41_943_040 + 176_160_768 + 2 * 4096) + 4096)
    assert m.dense_read_bytes == (layers_bytes + 2 * 128_256 * 4096) / 2  # the LM head, not the embedding
    assert m.expert_bytes == 0 and m.experts == 0
    assert m.linear_flops_per_token == 2 * 32 * (41_943_040 + 176_160_768) / 2
    assert m.lm_head_flops_per_row == 2 * 128_256 * 4096 / 2
    assert m.kv_bytes_per_token == 32 * 2 * 4 * 128 * 2  # 4 of 8 KV heads a rank
    assert m.attention_flops_per_pair == 2 * 32 * 32 * (2 * 128) / 2  # QK^T and PV over 32 query heads
    assert m.peak_flops_per_s == m.attention_peak_flops_per_s == 989.4e12
    assert m.bandwidth_bytes_per_s == 3350e9 and m.link_bytes_per_s == 450e9 and m.nvlink
    assert m.num_allreduces == 64 and m.allreduce_bytes_per_token == 64 * 4096 * 2 * 2 * (2 - 1) / 2
    assert (m.dp, m.num_moe_layers, m.moe_comm_bytes_per_token, m.num_layers) == (1, 0, 0.0, 32)
    assert model().num_allreduces == 0 and model().allreduce_bytes_per_token == 0


def test_experts_over_data_parallel_ranks_by_hand() -> None:
    """Qwen3-30B-A3B (48 MoE layers, 128 experts of 3 x 2,048 x 768, 8 a token, bf16): the experts
    spread over tp x dp GPUs; each MoE layer's tokens cross the group once more (ring: 2 (g-1)/g of
    2,048 x 2 B a token); with TP the attention's all-reduce stays, the MoE's moves to the group."""
    experts_bytes = 48 * 128 * 3 * 2048 * 768 * 2
    ep2 = model("qwen3-30b-a3b", dp=2)
    assert (ep2.experts, ep2.experts_per_token, ep2.num_moe_layers) == (128, 8, 48)
    assert ep2.expert_bytes == experts_bytes / 2 and ep2.num_allreduces == 0
    assert ep2.moe_comm_bytes_per_token == 48 * 2048 * 2 * 2 * (2 - 1) / 2
    tp2 = model("qwen3-30b-a3b", tp=2, dp=2)
    assert tp2.expert_bytes == experts_bytes / 4
    assert tp2.moe_comm_bytes_per_token == 48 * 2048 * 2 * 2 * (4 - 1) / 4
    assert tp2.num_allreduces == 2 * 48 - 48 and tp2.allreduce_bytes_per_token == 48 * 2048 * 2 * 2 * (2 - 1) / 2
    alone = model("qwen3-30b-a3b", tp=2)  # no DP: two all-reduces a layer, no group traffic
    assert alone.num_allreduces == 96 and alone.moe_comm_bytes_per_token == 0 and alone.num_moe_layers == 0
    assert alone.expert_bytes == experts_bytes / 2


def test_mla_attends_in_its_latent() -> None:
    """DeepSeek-V2-Lite: 27 layers, 16 heads, QK^T over 576 latent dims and PV over 512."""
    assert model("deepseek-v2-lite").attention_flops_per_pair == 2 * 27 * 16 * (576 + 512)


def _toy(**kw) -> GpuStepModel:
    base = dict(dense_read_bytes=1e9, expert_bytes=0.0, experts=0, experts_per_token=0, linear_flops_per_token=1e9,
                lm_head_flops_per_row=1e8, kv_bytes_per_token=1e5, attention_flops_per_pair=1e4,
                peak_flops_per_s=1e14, attention_peak_flops_per_s=5e13, bandwidth_bytes_per_s=1e12,
                link_bytes_per_s=1e11, nvlink=False, allreduce_bytes_per_token=0.0, num_allreduces=0, num_layers=10,
                legacy=False, enforce_eager=False,
                coefficients=Coefficients(hbm_efficiency=0.5, gemm_efficiency=0.25, kv_efficiency=0.5,
                                          attention_efficiency=0.5, allreduce_latency_s=1e-5, link_efficiency=0.5,
                                          nvlink_allreduce_latency_s=2e-6, nvlink_efficiency=0.25,
                                          step_overhead_s=1e-3, legacy_step_overhead_s=4e-3,
                                          legacy_seq_overhead_s=1e-4, eager_layer_overhead_s=5e-5))
    base.update(kw)
    return GpuStepModel(**base)


def test_a_step_s_parts_by_hand() -> None:
    """100 tokens, 4 sequences, 2,000 cached tokens, 50,000 attention pairs, 4 sampled rows."""
    shape = at(100, 4, 0, 2000, 50_000, 4)
    parts = _toy().components_s(shape)
    mem = 1e9 / (1e12 * 0.5)  # 2 ms
    gemm = (1e9 * 100 + 1e8 * 4) / (1e14 * 0.25)  # 4.016 ms
    assert parts["linear"] == pytest.approx((mem ** 3 + gemm ** 3) ** (1 / 3), rel=1e-12)
    assert parts["attention"] == pytest.approx(2000 * 1e5 / (1e12 * 0.5) + 50_000 * 1e4 / (5e13 * 0.5), rel=1e-12)
    assert parts["communication"] == 0.0 and parts["launches"] == 0.0 and parts["host"] == 1e-3
    assert _toy().step_s(shape) == pytest.approx(sum(parts.values()), rel=1e-12)
    pcie = _toy(num_allreduces=8, allreduce_bytes_per_token=1e4).components_s(shape)
    assert pcie["communication"] == pytest.approx(8 * 1e-5 + 100 * 1e4 / (1e11 * 0.5), rel=1e-12)
    nvlink = _toy(num_allreduces=8, allreduce_bytes_per_token=1e4, nvlink=True).components_s(shape)
    assert nvlink["communication"] == pytest.approx(8 * 2e-6 + 100 * 1e4 / (1e11 * 0.25), rel=1e-12)
    moe = _toy(dp=2, num_moe_layers=6, moe_comm_bytes_per_token=3e3).components_s(shape)
    assert moe["communication"] == pytest.approx(6 * 1e-5 + 100 * 2 * 3e3 / (1e11 * 0.5), rel=1e-12)
    moe_nv = _toy(dp=2, num_moe_layers=6, moe_comm_bytes_per_token=3e3, nvlink=True).components_s(shape)
    assert moe_nv["communication"] == pytest.approx(6 * 2e-6 + 100 * 2 * 3e3 / (1e11 * 0.25), rel=1e-12)
    assert _toy(enforce_eager=True).components_s(shape)["launches"] == pytest.approx(10 * 5e-5)
    assert _toy(legacy=True).components_s(shape)["host"] == pytest.approx(4e-3 + 1e-4 * 4)


def test_experts_read_are_those_the_group_s_tokens_touch() -> None:
    """8 of 64 experts a token, 10 tokens on each of 2 replicas: 1 - (7/8)^20 of the experts are read."""
    m = _toy(dense_read_bytes=0.0, expert_bytes=64e9, experts=64, experts_per_token=8, dp=2,
             linear_flops_per_token=0.0, lm_head_flops_per_row=0.0)
    read = 64e9 * (1 - (1 - 8 / 64) ** (10 * 2))
    assert m.components_s(at(10, 1, 0, 0, 0, 0))["linear"] == pytest.approx(read / (1e12 * 0.5), rel=1e-12)


@pytest.mark.parametrize(("interconnect", "per_direction", "nvlink"), [
    ("NVLink 5: 1.8 TB/s", 900e9, True),
    ("NVLink 900 GB/s (450 per direction); PCIe Gen5 x16 128 GB/s", 450e9, True),
    ("Infinity Fabric 896 GB/s", 448e9, True),
    ("PCIe Gen5 x16", 64e9, False),
    ("PCIe 3.0 x16", 16e9, False),
    ("PCIe Gen9 x16", 32e9, False),  # a generation kvplan has no figure for: Gen4's
    ("", 32e9, False),  # nothing said: PCIe Gen4
])
def test_links_from_the_catalog_text(interconnect: str, per_direction: float, nvlink: bool) -> None:
    from kvplan.perf.gpu_cost import has_nvlink

    gpu = replace(load_gpu("l40s"), interconnect=interconnect)
    assert link_bytes_per_s(gpu) == per_direction and has_nvlink(gpu) is nvlink


def test_gemm_peaks_by_quantization_and_missing_datasheet_figures() -> None:
    from kvplan.errors import KvplanError
    from kvplan.perf.gpu_cost import compute_peak_flops

    h100 = load_gpu("h100-sxm-80gb")  # 989.4 bf16, 1,978.9 fp8, 1,978.9 int8 dense
    assert compute_peak_flops(h100, "none") == 989.4e12 and compute_peak_flops(h100, "awq") == 989.4e12
    assert compute_peak_flops(h100, "fp8") == 1978.9e12 and compute_peak_flops(h100, "int8") == 1978.9e12
    no_int8 = replace(h100, int8_dense_tops=None, fp8_dense_tflops=None)
    assert compute_peak_flops(no_int8, "int8") == compute_peak_flops(no_int8, "fp8") == 989.4e12
    volta = replace(h100, bf16_dense_tflops=None, fp16_dense_tflops=125.0)
    assert compute_peak_flops(volta, "none") == 125e12
    no_tflops = replace(h100, bf16_dense_tflops=None, fp16_dense_tflops=None)
    for gpu in (no_tflops, replace(h100, memory_bandwidth_gbps=None)):
        with pytest.raises(KvplanError, match=r"GPU 'h100-sxm-80gb' has no bf16 or fp16 TFLOPS or no memory "
                                              r"bandwidth in the catalog \(kvplan/data/gpus.yaml\); a time prediction "
                                              r"needs both; `kvplan estimate` plans its memory"):
            compute_peak_flops(gpu, "none")


def test_served_dtype_and_quantization_set_the_bytes_read() -> None:
    """float32 weights are 4 B, bf16 2 B, fp8 1 B a parameter: experts and dense weights alike."""
    bf16, fp32 = model("qwen3-30b-a3b", dp=2), model("qwen3-30b-a3b", dp=2, dtype="float32")
    assert fp32.dense_read_bytes == 2 * bf16.dense_read_bytes and fp32.expert_bytes == 2 * bf16.expert_bytes
    fp8 = model("qwen3-30b-a3b", dp=2, quantization="fp8")
    assert fp8.expert_bytes == bf16.expert_bytes / 2


def test_host_time_beside_or_after_the_gpu() -> None:
    from kvplan.perf.gpu_cost import host_step_s

    assert host_step_s(0.010, 0.004, overlapped=False) == pytest.approx(0.014)
    assert host_step_s(0.010, 0.004, overlapped=True) == 0.010 and host_step_s(0.002, 0.004, overlapped=True) == 0.004


def test_moe_layers_counted_from_the_parameter_split() -> None:
    """Qwen3-30B-A3B: all 48 layers routed; DeepSeek-V2-Lite: its first layer dense (first_k_dense_replace 1)."""
    from kvplan.perf.gpu_cost import moe_layer_count

    assert moe_layer_count(load_model("qwen3-30b-a3b")) == 48
    assert moe_layer_count(load_model("deepseek-v2-lite")) == 26
    assert moe_layer_count(load_model("llama-3.1-8b-instruct")) == 0


def test_the_bundled_coefficients_are_every_named_one() -> None:
    """kvplan/data/perf/gpu_cost.yaml: one value per Coefficients field, the fit's facts beside them."""
    import yaml

    from kvplan.perf.gpu_cost import fitted_coefficients
    from kvplan.spec.catalog_files import bundled_dir

    coefficients, meta = fitted_coefficients()
    data = yaml.safe_load((bundled_dir() / "perf" / "gpu_cost.yaml").read_text())
    assert set(data["coefficients"]) <= set(Coefficients.names())
    assert all(getattr(coefficients, k) == v for k, v in data["coefficients"].items())
    assert "coefficients" not in meta and meta["rows_fitted"] == data["rows_fitted"]
