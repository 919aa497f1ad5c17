"""Every GPU of `kvplan gpus` predicts, or says in one line what the catalog lacks; every GPU with
measured vLLM kernels (aiconfigurator-core's systems) is in the catalog."""
from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.perf.kernel_tables import AIC_SYSTEMS
from kvplan.perf.predict import predict
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import gpu_catalog, load_gpu
from kvplan.spec.profiles import load_model
from kvplan.workload.datasets.random_dataset import RandomDataset


@pytest.mark.parametrize("name", sorted(gpu_catalog()))
def test_each_catalog_gpu_predicts_or_says_why(name: str) -> None:
    spec = load_model("llama-3.2-1b")
    requests = RandomDataset(256, 32, 0.0, 20, float("inf"), 1.0, None, 0).requests()
    try:
        args = EngineArgs.from_flags(gpu=load_gpu(name), max_model_len=2048)
        figures = predict(spec, args, requests).figures
    except KvplanError as exc:
        text = str(exc)
        assert "\n" not in text and name in text and ("TFLOPS" in text or "memory" in text or "bandwidth" in text), text
        return
    assert figures["completed"] == 20 and figures["median_tpot_ms"] > 0 and figures["median_ttft_ms"] > 0


def test_every_measured_system_is_in_the_catalog() -> None:
    for name, system in AIC_SYSTEMS.items():
        gpu = load_gpu(name)
        assert gpu.memory_bandwidth_gbps and gpu.bf16_dense_tflops, (name, system)
    assert {"b300_sxm", "gb200", "gb300", "rtx_pro_6000_server", "h100_sxm", "h200_sxm", "b200_sxm"} <= set(
        AIC_SYSTEMS.values()
    )


@pytest.mark.parametrize("name", sorted(gpu_catalog()))
def test_kernels_run_or_refuse_in_one_line_and_auto_says_which(name: str) -> None:
    """`--perf-model kernels` on any GPU: a prediction timed by the measured kernels, or one line
    naming the GPU and why (never an internal error, never the roofline in its place); `auto`
    names the model it used."""
    from kvplan.perf.kernel_tables import kernels_missing

    spec = load_model("llama-3.2-1b")
    requests = RandomDataset(256, 32, 0.0, 20, float("inf"), 1.0, None, 0).requests()
    try:
        args = EngineArgs.from_flags(gpu=load_gpu(name), max_model_len=2048)
        auto = predict(spec, args, requests, perf_model="auto").figures
    except KvplanError:
        return  # the catalog lacks what any step cost needs (the test above checks that line)
    missing = kernels_missing(name)
    assert auto["perf_model"].startswith("roofline" if missing else "kernels"), auto["perf_model"]
    try:
        kernels = predict(spec, args, requests, perf_model="kernels").figures
    except KvplanError as exc:
        text = str(exc)
        assert missing is not None and "\n" not in text and name in text and missing in text, text
        return
    assert missing is None and kernels["completed"] == 20
    assert "gemm" in kernels["step_cost_sources"] and "roofline" not in kernels["step_cost_sources"]["gemm"]
