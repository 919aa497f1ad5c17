"""Monotonic sanity of the predictions (hypothesis): more or faster GPUs never lower saturated
throughput, a higher request rate never lowers TTFT, an fp8 KV cache never gives fewer blocks."""
from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvplan.errors import KvplanError
from kvplan.perf.predict import predict, server_plan
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import load_gpu
from kvplan.spec.profiles import load_model
from kvplan.workload.datasets.random_dataset import RandomDataset

MODELS = ("llama-3.1-8b-instruct", "qwen3-8b", "qwen3-30b-a3b", "mistral-7b-v0.3", "qwen2.5-14b")
# each GPU at least as fast as the previous in every datasheet figure the cost model reads
FASTER = (("a100-sxm4-80gb", "h100-sxm-80gb"), ("h100-sxm-80gb", "h200-sxm-141gb"), ("l4", "l40s"),
          ("h200-sxm-141gb", "b200-sxm-180gb"))
VERSIONS = ("0.5.4", "0.10.1", "0.11.0")
# derandomized: the same cases every run (a failure reproduces, and shrinking a slow simulation
# cannot eat minutes of CI); KVPLAN_FUZZ_SEED=random draws new ones
SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=os.environ.get("KVPLAN_FUZZ_SEED") != "random", database=None)

workloads = st.builds(RandomDataset, random_input_len=st.integers(32, 3000), random_output_len=st.integers(8, 400),
                      random_range_ratio=st.sampled_from([0.0, 0.5]), num_prompts=st.integers(64, 160),
                      seed=st.integers(0, 3))


def saturated_tok_s(model: str, gpu: str, tp: int, version: str, workload: RandomDataset) -> float | None:
    spec = load_model(model)
    args = EngineArgs(gpu=load_gpu(gpu), tensor_parallel_size=tp, vllm_version=version, max_model_len=8192)
    try:
        return predict(spec, args, workload.requests()).figures["output_throughput"]
    except KvplanError:  # does not start there (memory, heads not divisible by tp)
        return None


@SETTINGS
@given(
    model=st.sampled_from(MODELS), pair=st.sampled_from(FASTER), version=st.sampled_from(VERSIONS), workload=workloads
)
def test_faster_gpu_never_lowers_saturated_throughput(
    model: str, pair: tuple[str, str], version: str, workload: RandomDataset
) -> None:
    slow = saturated_tok_s(model, pair[0], 1, version, workload)
    fast = saturated_tok_s(model, pair[1], 1, version, workload)
    if slow is not None:
        assert fast is not None and fast >= slow


# saturation: more requests than the batch holds (256 sequences on A100 and L40S), long enough to batch
saturating = st.builds(RandomDataset, random_input_len=st.integers(256, 3000), random_output_len=st.integers(64, 400),
                       random_range_ratio=st.sampled_from([0.0, 0.5]), num_prompts=st.integers(300, 360),
                       seed=st.integers(0, 3))


@SETTINGS
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(("a100-sxm4-80gb", "h100-sxm-80gb")),
       version=st.sampled_from(VERSIONS), workload=saturating)
def test_more_gpus_never_lower_saturated_throughput(
    model: str, gpu: str, version: str, workload: RandomDataset
) -> None:
    """Tensor parallelism over NVLink. Over PCIe (L40S, L4) the all-reduce traffic can make TP=2
    slower than one GPU, as it is in practice; there more GPUs means more replicas (`kvplan plan`)."""
    one = saturated_tok_s(model, gpu, 1, version, workload)
    two = saturated_tok_s(model, gpu, 2, version, workload)
    if one is not None and two is not None:
        assert two >= one


@SETTINGS
@given(model=st.sampled_from(MODELS[:3]), gpu=st.sampled_from(("h100-sxm-80gb", "l40s")),
       rates=st.tuples(st.floats(0.5, 40), st.floats(1.05, 4.0)), workload=workloads)
def test_higher_rate_never_lowers_ttft(
    model: str, gpu: str, rates: tuple[float, float], workload: RandomDataset
) -> None:
    """The same arrivals compressed in time. The scheduler sees an arrival at the next step
    boundary (as vLLM's engine loop does), so TTFT is resolved to one decode step: a higher rate
    may shift an arrival to an earlier point inside a step, never by more than that step."""
    from dataclasses import replace

    spec = load_model(model)
    args = EngineArgs(gpu=load_gpu(gpu), max_model_len=8192)
    try:
        plan_capacity(spec, args)
        server_plan(spec, args)
    except KvplanError:
        assume(False)  # the model does not start on this GPU
    low = predict(spec, args, replace(workload, request_rate=rates[0]).requests()).figures
    high = predict(spec, args, replace(workload, request_rate=rates[0] * rates[1]).requests()).figures
    # Recompute preemption breaks the property in vLLM too: which request is evicted (the newest)
    # depends on arrival order, so one preempted prompt can set P99 at the lower rate (seen: Qwen3-30B-A3B
    # on one H100, a nearly full pool: 2 preemptions at 15 req/s gave P99 TTFT 547 ms, 17 at 30 req/s 120 ms).
    # The property is about queueing, so it is checked where the pool holds every request.
    assume(not low["num_preemptions"] and not high["num_preemptions"])
    step_ms = max(low["p99_itl_ms"] or 0.0, high["p99_itl_ms"] or 0.0)
    assert high["mean_ttft_ms"] >= low["mean_ttft_ms"] - step_ms
    assert high["p99_ttft_ms"] >= low["p99_ttft_ms"] - step_ms


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS + ("deepseek-v2-lite", "gemma-2-9b", "llama-3.1-70b")),
       gpu=st.sampled_from(("a100-sxm4-80gb", "h100-sxm-80gb", "l40s", "l4", "h200-sxm-141gb")),
       tp=st.sampled_from((1, 2, 4)), util=st.floats(0.5, 0.95), version=st.sampled_from(VERSIONS))
def test_fp8_kv_never_fewer_blocks(model: str, gpu: str, tp: int, util: float, version: str) -> None:
    spec = load_model(model)
    base = EngineArgs(gpu=load_gpu(gpu), tensor_parallel_size=tp, gpu_memory_utilization=util, vllm_version=version,
                      max_model_len=4096)
    try:
        auto = plan_capacity(spec, base)
    except KvplanError:
        return
    from dataclasses import replace

    fp8 = plan_capacity(spec, replace(base, kv_cache_dtype="fp8"))
    assert fp8.num_gpu_blocks >= auto.num_gpu_blocks
    assert fp8.kv_cache_tokens >= auto.kv_cache_tokens and (fp8.fits or not auto.fits)
    assert not math.isnan(fp8.max_concurrency)
