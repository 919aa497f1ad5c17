"""The measured-kernel step cost (kvplan.perf.kernel_cost) on a copied subset of AIConfigurator's
H100 vLLM 0.24.0 tables (tests/data/aiconfigurator/kernels, SOURCES.md)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from step_shapes import at

from kvplan.errors import KvplanError
from kvplan.perf.gpu_cost import GpuStepModel
from kvplan.perf.kernel_cost import KernelStepModel
from kvplan.perf.kernel_tables import DATA_ENV, LogGrid, system_tables
from kvplan.spec.gpu import load_gpu
from kvplan.spec.profiles import load_model
from kvplan.workload.datasets.random_dataset import RandomDataset

DATA = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "kernels"



@pytest.fixture()
def kernels(monkeypatch) -> KernelStepModel:
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    return KernelStepModel.build(load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb"), tp=2)


def test_grid_is_exact_on_its_points_and_log_linear_between() -> None:
    frame = pd.DataFrame(
        {"m": [1, 4, 16, 1, 4, 16], "n": [8, 8, 8, 64, 64, 64], "latency": [1.0, 2.0, 4.0, 3.0, 5.0, 9.0]}
    )
    grid = LogGrid(frame, ["m", "n"])
    assert grid(4, 8) == 2.0 and grid(16, 64) == 9.0
    assert grid(2, 8) == pytest.approx(1.5)  # halfway in log(m)
    assert grid(32, 8) == pytest.approx(8.0)  # twice the largest m: twice the time
    # a slow outlier at a smaller point drops to the next larger point's time
    noisy = LogGrid(pd.DataFrame({"m": [1, 2, 4], "latency": [0.5, 9.0, 1.0]}), ["m"])
    assert noisy(2) == 1.0 and noisy(1) == 0.5


def test_every_op_names_its_table(kernels: KernelStepModel) -> None:
    """Llama-3.1-8B at TP2: 16/4 heads of 128 per GPU are not in the copied attention subset (32/8
    are), so attention falls back to the roofline and says so; GEMMs and all-reduce are measured."""
    s = kernels.sources
    assert s["gemm"].startswith("h100_sxm/gemm vllm 0.24.0") and "bfloat16" in s["gemm"]
    assert s["allreduce"].startswith("h100_sxm/comm vllm 0.24.0")
    assert s["context_attention"].startswith("roofline") and "moe" not in s


def test_an_older_vllm_than_the_tables_says_its_times_are_less_certain(monkeypatch) -> None:
    """The copied tables are vLLM 0.24.0's kernels: asking about 0.17 (which may pick other kernels,
    e.g. another MoE backend) names both builds; asking about the tables' build or a later one adds
    nothing."""
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu = load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb")
    old = KernelStepModel.build(spec, gpu, tp=2, vllm_version="0.17.0").sources["kernel_build"]
    assert "vLLM 0.24.0's kernels" in old and "vLLM 0.17.0 is older" in old and "MoE" not in old  # a dense model
    for version in ("0.24.0", "0.28.0"):
        assert "kernel_build" not in KernelStepModel.build(spec, gpu, tp=2, vllm_version=version).sources


def test_measured_attention_when_the_heads_match(monkeypatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    model = KernelStepModel.build(load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb"), tp=1)
    assert model.sources["generation_attention"].startswith("h100_sxm/attention vllm 0.24.0 heads=32/8x128")
    assert "allreduce" not in model.sources  # TP1 has none


def test_decode_step_is_near_the_roofline(kernels: KernelStepModel) -> None:
    """Two independent models of one decode step of 32 requests agree within a factor of 2."""
    spec, gpu = load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb")
    roof = GpuStepModel.build(spec, gpu, tp=2)
    ctx = 32 * 1024
    measured, physical = kernels.step_s(at(32, 32, 0, ctx, ctx, 32)), roof.step_s(at(32, 32, 0, ctx, ctx, 32))
    assert 0.5 < measured / physical < 2.0


@settings(max_examples=60, deadline=None)
@given(tokens=st.integers(1, 8192), extra=st.integers(1, 4096), ctx=st.integers(1, 10**6),
       name=st.sampled_from(["llama-3.1-8b-instruct", "moonshotai--Kimi-K2.5"]))  # dense; MLA + MoE + other_linear
def test_step_cost_is_monotone_in_its_work(tokens: int, extra: int, ctx: int, name: str) -> None:
    model = _model(name)
    a = model.step_s(at(tokens, tokens, 0, ctx + tokens, ctx + tokens, tokens))
    assert model.step_s(at(tokens + extra, tokens + extra, 0, ctx + tokens, ctx + tokens, tokens)) >= a  # more tokens
    assert (
        model.step_s(at(tokens, tokens, 0, ctx + tokens + extra, ctx + tokens + extra, tokens)) >= a
    )  # longer contexts
    pre = model.step_s(at(tokens, 1, tokens, tokens, tokens * (tokens + 1) // 2, 1, prefill_seqs=1,
                       prefill_pairs=tokens * (tokens + 1) // 2))
    longer = model.step_s(
        at(tokens + extra,
        1,
        tokens + extra,
        tokens + extra,
        (tokens + extra) * (tokens + extra + 1) // 2,
        1,
        prefill_seqs=1,
        prefill_pairs=(tokens + extra) * (tokens + extra + 1) // 2),
    )
    assert longer >= pre


_CACHE: dict[str, KernelStepModel] = {}


def _model(name: str = "llama-3.1-8b-instruct") -> KernelStepModel:
    """Built once per model for the property test (hypothesis runs it many times; no fixture per example)."""
    import os

    if name not in _CACHE:
        before = os.environ.get(DATA_ENV)
        os.environ[DATA_ENV] = str(DATA)
        try:
            system_tables.cache_clear()
            spec = load_model(name if "--" not in name else str(CONFIGS / f"{name}_config.json"))
            _CACHE[name] = KernelStepModel.build(spec, load_gpu("h100-sxm-80gb"), tp=2)
        finally:
            if before is None:
                os.environ.pop(DATA_ENV)
            else:
                os.environ[DATA_ENV] = before
    return _CACHE[name]


def test_an_unmeasured_gpu_is_one_line(monkeypatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(DATA))
    why = "cannot time rtx-4090: AIConfigurator measured no rtx-4090.*--perf-model roofline"
    with pytest.raises(KvplanError, match=why):
        KernelStepModel.build(load_model("llama-3.1-8b-instruct"), load_gpu("rtx-4090"))


def test_predict_uses_and_reports_the_kernels(monkeypatch) -> None:
    from kvplan.perf.predict import predict
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.workload.request import Request

    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    args = EngineArgs.from_flags(gpu=load_gpu("h100-sxm-80gb"), max_model_len=4096)
    reqs = [Request(0.0, 1024, 64) for _ in range(16)]
    spec = load_model("llama-3.1-8b-instruct")
    measured = predict(spec, args, reqs, max_concurrency=8, perf_model="kernels").figures
    physical = predict(spec, args, reqs, max_concurrency=8, perf_model="roofline").figures
    assert measured["step_cost_sources"]["gemm"].startswith("h100_sxm/gemm")
    assert physical["step_cost_sources"] == {"all ops": "roofline (datasheet, kvplan's global coefficients)"}
    assert 0.5 < measured["mean_tpot_ms"] / physical["mean_tpot_ms"] < 2.0


def test_batch_lookup_equals_one_at_a_time() -> None:
    frame = pd.DataFrame(
        {"m": [1, 4, 16, 1, 4, 16], "n": [8, 8, 8, 64, 64, 64], "latency": [1.0, 2.0, 4.0, 3.0, 5.0, 9.0]}
    )
    grid = LogGrid(frame, ["m", "n"])
    ms, ns = [0.5, 1, 2, 3.3, 16, 40], [8, 20, 64, 100, 1, 30]
    assert grid.batch(ms, ns).tolist() == pytest.approx([grid(m, n) for m, n in zip(ms, ns)], rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2])  # measured generation attention at TP1, its roofline at TP2
def test_fast_decode_with_measured_kernels_is_bit_identical(monkeypatch, tp: int) -> None:
    """A decode stretch is timed with one vectorized call: the same floats as stepping one at a time,
    also with requests arriving while the queue waits for blocks."""
    import math

    import numpy as np

    from kvplan.perf.predict import scheduler_config, server_plan
    from kvplan.perf.schedule import simulate
    from kvplan.plan.engine_args import EngineArgs

    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu = load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb")
    model = KernelStepModel.build(spec, gpu, tp=tp)
    config = scheduler_config(server_plan(spec, EngineArgs(gpu=gpu, tensor_parallel_size=tp, vllm_version="0.11.0")))
    for rate in (20.0, math.inf):
        reqs = RandomDataset(500, 120, 0.5, 120, rate, seed=5).requests()
        slow = simulate(reqs, config, model, fast=False)
        fast = simulate(reqs, config, model)
        for name in ("step_context_tokens", "step_end_s", "send_s", "first_token_s", "last_token_s", "itl_s"):
            assert np.array_equal(getattr(slow, name), getattr(fast, name)), name
        assert fast.extras["fast_decode_steps"] > 0


CONFIGS = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "model_configs"


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*_config.json") if "hf_quant" not in p.name))
def test_a_decode_step_reads_at_least_the_weights_one_token_touches(monkeypatch, config: str) -> None:
    """Physics, for every real config AIConfigurator ships (MLA, multimodal wrappers, hybrids):
    one decode step's GPU time is at least the active weights per GPU over the datasheet HBM
    bandwidth. A model whose experts, MLA projections or mixers the kernel model misses (as it
    missed Kimi-K2.5's `text_config` experts) falls below it."""
    from kvplan.plan import overheads as oh

    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu, tp = load_model(str(CONFIGS / config)), load_gpu("h100-sxm-80gb"), 8
    model = KernelStepModel.build(spec, gpu, tp=tp, async_scheduling=False)  # the CPU's step added, so it subtracts
    p = spec.params
    bytes_per_param = oh.model_weights_bytes(spec, "auto", None) / p.decoder
    active_bytes = (p.active - p.embedding - p.encoder) * bytes_per_param / tp
    gpu_s = model.step_s(at(1, 1, 0, 1000, 1000, 1)) - model.coefficients.step_overhead_s
    assert gpu_s >= active_bytes / (gpu.memory_bandwidth_gbps * 1e9)
    if spec.is_mla or spec.has_state:
        assert "other_linear" in model.sources  # their projections / mixers are named, not dropped


@pytest.mark.parametrize(
    "config", ["moonshotai--Kimi-K2.5", "Qwen--Qwen3-VL-30B-A3B-Instruct", "meta-llama--Llama-4-Scout-17B-16E-Instruct"]
)
def test_experts_of_a_multimodal_config_are_found_in_its_text_config(config: str) -> None:
    """These keep their MoE keys in `text_config`: the experts' bytes (memory under EP, the
    roofline's reads) and the step model's expert count come from there."""
    from kvplan.plan import overheads as oh

    spec = load_model(str(CONFIGS / f"{config}_config.json"))
    n_exp, k, inter, _ = spec.moe_shape
    assert n_exp >= 16 and k >= 1 and inter > 0
    assert oh.expert_weights_bytes(spec) > 0.5 * spec.params.experts  # at least 4 bits a weight
    assert GpuStepModel.build(spec, load_gpu("h100-sxm-80gb"), tp=8).experts == n_exp


def test_an_unmeasured_moe_split_scales_the_nearest_measured_one() -> None:
    """MiniMax-M2.5's 256x1536 experts are measured at moe_tp 1, 2 and 4: at tp 8 each GPU holds half
    of tp 4's expert slices, so the tp-4 time is halved and the source says it was scaled."""
    from kvplan.perf.kernel_grids import moe_grid
    from kvplan.perf.kernel_tables import TableRef

    spec = load_model(str(CONFIGS / "MiniMaxAI--MiniMax-M2.5_config.json"))
    n_exp, k, inter, _ = spec.moe_shape
    rows = [dict(moe_dtype="fp8_block", hidden_size=spec.hidden_size, inter_size=inter, topk=k, num_experts=n_exp,
                 moe_tp_size=tp, moe_ep_size=1, distribution="power_law_1.2", num_tokens=t, latency=lat * 4 / tp)
            for tp in (1, 2, 4) for t, lat in ((1, 0.05), (64, 0.2), (8192, 2.0))]
    tables = {"moe": TableRef(pd.DataFrame(rows), "h200_sxm/moe vllm 0.24.0")}
    sources: dict[str, str] = {}
    tp4 = moe_grid(tables, spec, "fp8_block", (4, 1), sources)
    assert "scaled" not in sources["moe"] and tp4(64) == pytest.approx(0.2)
    tp8 = moe_grid(tables, spec, "fp8_block", (8, 1), sources)
    assert tp8(64) == pytest.approx(0.1) and tp8(8192) == pytest.approx(1.0)
    assert "tp4 ep1" in sources["moe"] and "scaled by 4/8 to tp8 ep1 (not measured)" in sources["moe"]
    assert moe_grid(tables, spec, "fp8_block", (3, 1), {}) is not None  # tp 1 divides anything
    assert moe_grid(tables, spec, "nvfp4", (4, 1), {}) is None  # no table for the dtype: the roofline


def test_a_group_wider_than_a_node_says_its_collectives_are_not_modeled(monkeypatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu = load_model(str(CONFIGS / "moonshotai--Kimi-K2.5_config.json")), load_gpu("h100-sxm-80gb")
    wide = KernelStepModel.build(spec, gpu, tp=4, dp=4, expert_parallel=True)
    assert "16 GPUs are more than one 8-GPU node" in wide.sources["moe_allreduce"]
    assert "node" not in KernelStepModel.build(spec, gpu, tp=4, dp=2, expert_parallel=True).sources["moe_allreduce"]


def test_data_parallel_moe_layers_exchange_tokens_over_nccl(monkeypatch, tmp_path) -> None:
    """--data-parallel-size 2 on a MoE model: each MoE layer all-gathers the replicas' hidden states
    and reduce-scatters the experts' outputs over NCCL (vLLM's allgather_reducescatter backend),
    timed from NCCL's measured table, then reduces within each replica's TP group; a system without
    the NCCL table falls back to one custom all-reduce's bytes over the whole group."""
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu = load_model(str(CONFIGS / "MiniMaxAI--MiniMax-M2.5_config.json")), load_gpu("h100-sxm-80gb")
    model = KernelStepModel.build(spec, gpu, tp=2, dp=2, expert_parallel=True)
    nccl = pd.read_csv(DATA / "h100_sxm" / "comm" / "nccl" / "2.29.2" / "nccl_perf.csv")
    at = nccl[(nccl["num_gpus"] == 2) & (nccl["message_size"] == 65536)].set_index("op_name")["latency"]
    # 65,536 values of the group: NCCL's two collectives of that buffer, then each replica's half all-reduced
    assert model.moe_allreduce(65536) == pytest.approx(at["all_gather"] + at["reduce_scatter"] + model.allreduce(32768))
    assert model.eager_moe_allreduce(65536) == pytest.approx(at["all_gather"] + at["reduce_scatter"]
                                                             + model.eager_allreduce(32768))
    assert "nccl 2.29.2 all_gather + reduce_scatter x2" in model.sources["moe_allreduce"]
    assert "custom all-reduce x2" in model.sources["moe_allreduce"]  # each replica's TP group after it
    tokens, h, layers = 64, spec.hidden_size, spec.num_layers
    without = KernelStepModel.build(spec, gpu, tp=2, dp=2, expert_parallel=True)
    without.moe_allreduce = None  # the same model without the exchange: one all-reduce's bytes over the group
    moe_comm = model.moe_allreduce(2 * tokens * h)
    pooled = without._allreduce_roofline_ms(2 * tokens * h, 4)
    assert model._linear_ms(tokens, tokens) - without._linear_ms(tokens, tokens) == pytest.approx(
        layers * (moe_comm - pooled)
    )
    bare = tmp_path / "h100_sxm" / "comm"  # the same tables but NCCL's
    shutil.copytree(DATA / "h100_sxm", tmp_path / "h100_sxm")
    shutil.rmtree(bare / "nccl")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    system_tables.cache_clear()
    fallback = KernelStepModel.build(spec, gpu, tp=2, dp=2, expert_parallel=True)
    assert (
        "nccl" not in fallback.sources["moe_allreduce"] and "custom all-reduce x4" in fallback.sources["moe_allreduce"]
    )
    system_tables.cache_clear()


def test_sliding_window_layers_attend_to_their_window_only(monkeypatch) -> None:
    """gpt-oss alternates full layers with 128-token sliding windows (vLLM's layer_types): at a
    100k-token context the windowed half costs almost nothing, so attention is about half of what
    it would be if every layer read the whole context; prefill pairs are capped the same way."""
    import numpy as np

    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec = load_model(str(CONFIGS / "openai--gpt-oss-120b_config.json"))
    model = KernelStepModel.build(spec, load_gpu("h100-sxm-80gb"), tp=8)
    groups = dict((w, n) for n, w in model.attention_groups)
    assert groups == {None: spec.num_layers // 2, 128.0: spec.num_layers // 2}
    ctx = 8 * 100_000.0
    all_full = model.attention_layers * float(model._decode_attention_ms(8, np.array([ctx]))[0])
    assert 0.45 < model._attention_ms(0, 0, 0, 8, ctx) / all_full < 0.55
    n = 8192
    pairs = n * (n + 1) / 2
    full_prefill = model.attention_layers * model._prefill_attention_ms(1, n, pairs)
    assert 0.45 < model._attention_ms(1, n, pairs, 0, 0) / full_prefill < 0.55


def test_elementwise_traffic_is_per_token_and_does_not_shrink_with_tp(monkeypatch) -> None:
    """Norms run on the whole hidden state on every TP rank, so the per-token HBM traffic of the
    kernels between the GEMMs falls less than 1/TP; it is linear in the step's tokens and named."""
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu = load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb")
    one, two = (KernelStepModel.build(spec, gpu, tp=tp) for tp in (1, 2))
    norms = spec.num_layers * 2 * 4 * spec.hidden_size * 2  # bytes a token: 2 fused add+RMSNorms a layer
    assert one.elementwise_bytes_per_token > two.elementwise_bytes_per_token > one.elementwise_bytes_per_token / 2
    assert two.elementwise_bytes_per_token > norms
    assert one._elementwise_ms(4096) == pytest.approx(2 * one._elementwise_ms(2048))
    assert one.sources["elementwise"].startswith("roofline")


def test_a_step_above_the_captured_sizes_uses_the_eager_all_reduce(kernels: KernelStepModel) -> None:
    """vLLM runs a batch above the largest CUDA graph (512 tokens) eagerly: the measured eager
    custom all-reduce (slower by its launch) times those steps, the graph timings the rest."""
    from kvplan.perf.kernel_cost import CUDAGRAPH_MAX_TOKENS

    values = 1024 * load_model("llama-3.1-8b-instruct").hidden_size
    assert kernels._tp_allreduce_ms(values, True) > kernels._tp_allreduce_ms(values, False)
    assert "eager" in kernels.sources["allreduce"] and str(CUDAGRAPH_MAX_TOKENS) in kernels.sources["allreduce"]
    below = kernels._linear_ms(CUDAGRAPH_MAX_TOKENS, 1) - kernels._elementwise_ms(CUDAGRAPH_MAX_TOKENS)
    above = kernels._linear_ms(CUDAGRAPH_MAX_TOKENS + 1, 1) - kernels._elementwise_ms(CUDAGRAPH_MAX_TOKENS + 1)
    spec = kernels.spec
    jump = 2 * spec.num_layers * (kernels._tp_allreduce_ms((CUDAGRAPH_MAX_TOKENS + 1) * spec.hidden_size, True)
                                  - kernels._tp_allreduce_ms((CUDAGRAPH_MAX_TOKENS + 1) * spec.hidden_size, False))
    assert jump > 0 and above - below >= jump * 0.99


def test_a_small_max_num_seqs_captures_smaller_graphs(monkeypatch) -> None:
    """vLLM captures graphs up to min(2 x --max-num-seqs, 512) tokens: with --max-num-seqs 64 a
    256-token step already runs eagerly (the eager all-reduce), as the start-up memory plan assumes."""
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu = load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb")
    default, small = (KernelStepModel.build(spec, gpu, tp=2, max_num_seqs=n) for n in (None, 64))
    assert (default.captured_tokens, small.captured_tokens) == (512, 128)
    assert "above 128 tokens" in small.sources["allreduce"]
    assert small._linear_ms(256, 1) > default._linear_ms(256, 1)
    assert small._linear_ms(64, 1) == default._linear_ms(64, 1)


def test_an_8bit_gemm_above_bf16_is_host_work_hidden_by_graphs_and_beside_the_gpu_when_eager() -> None:
    """A table timing the 8-bit GEMM above the bf16 one (B200's block-fp8 rows: flat in m and
    shape): on the GPU it takes at most the bf16 kernel's time, the excess is host work."""
    from kvplan.perf.kernel_grids import gemm_grid
    from kvplan.perf.kernel_tables import TableRef

    rows = [(m, n, k, dtype, lat) for m in (16, 512, 1024, 4096) for n in (1024, 4096) for k in (1024, 4096)
            for dtype, lat in (("bfloat16", 0.01 + 1e-4 * m), ("fp8_block", 0.17 + 1e-5 * m))]
    frame = pd.DataFrame(rows, columns=["m", "n", "k", "gemm_dtype", "latency"])
    sources: dict[str, str] = {}
    grid = gemm_grid({"gemm": TableRef(frame, "test/gemm")}, "fp8_block", sources)
    assert grid is not None and "host work" in sources["gemm"]
    assert grid(512, 1024, 1024) == pytest.approx(0.01 + 1e-4 * 512)  # the bf16 kernel's time
    assert grid.host(512, 1024, 1024) == pytest.approx(0.16 + 1e-5 * 512 - 1e-4 * 512)
    assert grid(4096, 1024, 1024) == pytest.approx(0.17 + 1e-5 * 4096) and grid.host(4096, 1024, 1024) == 0.0
    bf16 = gemm_grid({"gemm": TableRef(frame, "test/gemm")}, "bfloat16", {})
    assert bf16.host(512, 1024, 1024) == 0.0
    assert gemm_grid({"gemm": TableRef(frame, "test/gemm")}, "nvfp4", {}) is None  # not measured


def test_an_eager_step_takes_the_longer_of_gpu_work_and_gemm_host_work(monkeypatch) -> None:
    """Graph steps (<= 512 tokens) pay no GEMM host work; an eager step's forward pass is the
    longer of its GPU work and its GEMMs' host work, never their sum."""
    from kvplan.perf.kernel_grids import MeasuredGemm
    from kvplan.perf.kernel_tables import LogGrid

    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    model = KernelStepModel.build(load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb"), tp=1)
    frame = pd.DataFrame([(m, n, k, lat) for m in (1, 8192) for n in (1, 10**6) for k in (1, 10**6) for lat in (1.0,)],
                         columns=["m", "n", "k", "latency"])  # 1 ms a GEMM whatever its shape, as measured
    bf16 = model.gemm
    model.gemm = MeasuredGemm(LogGrid(frame, ["m", "n", "k"]), bf16.grid)
    quantized = [(c, m, n, k) for c, label, m, n, k in model._gemm_calls(1024, 1) if label != "head"]  # head: bf16
    host = model._host_gemm_ms(1024, 1)
    assert host == pytest.approx(sum(c * (1.0 - bf16(m, n, k)) for c, m, n, k in quantized))
    assert sum(c for c, *_ in quantized) == 4 * 32 and host > 100  # qkv, o, gate_up, down a layer, ~1 ms each
    gpu = model._linear_ms(1024, 1) + model._attention_ms(1, 1024, 1024 * 1025 / 2, 0, 0)
    assert gpu < host  # the CPU sets the pace here
    assert model._beside_launches(gpu, 1024, 1) == host and model._beside_launches(gpu, 512, 1) == gpu


def test_the_moe_router_and_lm_head_are_bf16_gemms_whatever_the_checkpoint_quantization(monkeypatch) -> None:
    """vLLM builds every MoE gate with quant_config=None (Qwen3-MoE, DeepSeek, MiniMax-M2) and the
    LM head unquantized: an FP8 checkpoint's router and head are timed from the bf16 table (the H100
    subset here has bf16 GEMMs only, so its fp8 GEMMs fall back to the roofline); a dense model has
    no router."""
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec = load_model(str(CONFIGS / "Qwen--Qwen3-235B-A22B-FP8_config.json"))
    model = KernelStepModel.build(spec, load_gpu("h100-sxm-80gb"), tp=4)
    assert (
        "gemm_dtype=bfloat16" in model.sources["unquantized_gemm"] and "MoE gate" in model.sources["unquantized_gemm"]
    )
    assert model.sources["gemm"].startswith("roofline") and model.plain_gemm is not None
    n_exp, h = spec.moe_shape[0], spec.hidden_size
    assert model._table_ms("router", 1024, n_exp, h) == model.plain_gemm(1024, n_exp, h) > 0
    assert model._table_ms("head", 8, spec.vocab_size / 4, h) == model.plain_gemm(8, spec.vocab_size / 4, h)
    assert model._table_ms("attention", 1024, 4096, h) == model._gemm_ms(1024, 4096, h)  # fp8: the roofline here
    assert (model.moe_layers, "router", 1024, n_exp, h) in model._gemm_calls(1024, 1)
    dense = KernelStepModel.build(load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb"), tp=1)
    assert "MoE gate" not in dense.sources["unquantized_gemm"] and not any(
        t == "router" for _, t, *_ in dense._gemm_calls(64, 1)
    )


def test_unquantized_attention_of_a_quantized_checkpoint_is_timed_from_the_bf16_table(monkeypatch) -> None:
    """NVIDIA's NVFP4 MiniMax-M2.5 keeps self_attn in bf16: on H100 (whose copied tables have bf16
    GEMMs only, no NVFP4) its q/k/v/o come from the measured bf16 table and say so, while its
    other GEMMs fall back to the roofline; the same model quantized throughout times them as fp8."""
    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    gpu = load_gpu("h100-sxm-80gb")
    model = KernelStepModel.build(load_model(str(CONFIGS / "nvidia--MiniMax-M2.5-NVFP4_config.json")), gpu, tp=2)
    assert "attention (kept unquantized" in model.sources["unquantized_gemm"] and model.sources["gemm"].startswith(
        "roofline"
    )
    assert model._table_ms("attention", 4096, 4096, 4096) == model.plain_gemm(4096, 4096, 4096) > 0
    assert model._table_ms("attention", 4096, 4096, 4096) != model._gemm_ms(4096, 4096, 4096)
    assert model._table_ms("attention", 0, 4096, 4096) == 0.0
    fp8 = KernelStepModel.build(load_model(str(CONFIGS / "MiniMaxAI--MiniMax-M2.5_config.json")), gpu, tp=2)
    assert "attention" not in fp8.plain_tables and "attention" not in fp8.sources["unquantized_gemm"]


def test_tables_without_pyarrow_are_a_one_line_error(tmp_path, monkeypatch) -> None:
    """$KVPLAN_KERNEL_DATA on an install without the kernels extra: pandas cannot read parquet. The
    error names pyarrow and the extra (exit 2), never an internal error."""
    from kvplan.perf.kernel_tables import load_table

    (tmp_path / "h100_sxm" / "gemm" / "vllm" / "0.24.0").mkdir(parents=True)
    (tmp_path / "h100_sxm" / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet").write_bytes(b"PAR1")

    def no_engine(*_: object, **__: object) -> None:
        raise ImportError("Unable to find a usable engine; tried using: 'pyarrow', 'fastparquet'")

    monkeypatch.setattr(pd, "read_parquet", no_engine)
    with pytest.raises(KvplanError, match=r"needs pyarrow.*kvplan\[kernels\]"):
        load_table(tmp_path, "h100_sxm", "gemm", "gemm_perf")


def test_untimed_kernels_add_their_floor_per_layer(monkeypatch) -> None:
    """Kernels no table times (norms, rotary, KV write; MoE routing) cost at least the kernel
    floor each: 4 a layer and 8 more a MoE layer, counted from the model's layers."""
    from dataclasses import replace

    from kvplan.perf.gpu_cost import fitted_coefficients

    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    gpu = load_gpu("h100-sxm-80gb")
    dense = KernelStepModel.build(load_model("llama-3.1-8b-instruct"), gpu, tp=1, async_scheduling=False)
    assert dense.untimed_kernels == 4 * 32
    moe_spec = load_model("qwen3-30b-a3b")
    moe = KernelStepModel.build(moe_spec, gpu, tp=1, async_scheduling=False)
    assert moe.untimed_kernels == 4 * moe_spec.num_layers + 8 * moe.moe_layers and moe.moe_layers == moe_spec.num_layers
    base = fitted_coefficients()[0]
    no_floor = KernelStepModel.build(load_model("llama-3.1-8b-instruct"), gpu, tp=1, async_scheduling=False,
                                     coefficients=replace(base, kernel_floor_s=0.0))
    shape = (8, 8, 0, 8 * 1024, 8 * 1024, 8)
    assert dense.step_s(at(*shape)) - no_floor.step_s(at(*shape)) == pytest.approx(4 * 32 * base.kernel_floor_s)
    assert "untimed_kernels" in dense.sources


def test_async_scheduling_overlaps_the_cpu_with_the_gpu(monkeypatch) -> None:
    """vLLM >= 0.14 schedules step N+1 while step N runs: a step takes max(GPU, CPU), not their
    sum; --no-async-scheduling (or an older vLLM) adds them. Small decode steps are CPU-bound."""
    from kvplan.perf.gpu_cost import fitted_coefficients

    monkeypatch.setenv(DATA_ENV, str(DATA))
    system_tables.cache_clear()
    spec, gpu = load_model("llama-3.1-8b-instruct"), load_gpu("h100-sxm-80gb")
    cpu_s = fitted_coefficients()[0].step_overhead_s
    sync = KernelStepModel.build(spec, gpu, tp=2, async_scheduling=False)
    overlapped = KernelStepModel.build(spec, gpu, tp=2, async_scheduling=True)
    assert not KernelStepModel.build(spec, gpu, tp=2, vllm_version="0.11.0").overlaps_cpu
    assert KernelStepModel.build(spec, gpu, tp=2, vllm_version="0.15.1").overlaps_cpu
    for shape in [(1, 1, 0, 100, 100, 1), (256, 256, 0, 256 * 2048, 256 * 2048, 256)]:
        gpu_s = sync.step_s(at(*shape)) - cpu_s
        assert overlapped.step_s(at(*shape)) == pytest.approx(max(gpu_s, cpu_s))
        assert overlapped.step_s(at(*shape)) < sync.step_s(at(*shape))
    assert "beside" in overlapped.sources["host"] and "after" in sync.sources["host"]
