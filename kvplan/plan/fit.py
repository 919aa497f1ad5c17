"""`Fit`: whether a batch of requests fits one GPU's KV budget as vLLM plans it, the largest concurrency
at the asked length and the longest length at the asked concurrency."""
from __future__ import annotations

from dataclasses import dataclass, replace

from kvplan.plan.budget import CapacityPlan, plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.explain import concurrency_note, memory_shortfall, weights_fit
from kvplan.plan.kv import KvLayout
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec


@dataclass(frozen=True)
class Fit:
    gpu: GpuSpec | None  # None: only --kv-cache-memory-bytes given (vLLM then ignores the GPU's size)
    gpu_memory_utilization: float
    weights_bytes_per_gpu: int
    kv_available_bytes_per_gpu: int
    kv_needed_bytes_per_gpu: int
    fits: bool
    max_concurrency_at_ctx: int
    max_ctx_at_concurrency: int
    capacity: CapacityPlan  # vLLM's memory budget, which the figures above are taken from
    weights_fit: bool = True  # do the weights alone fit in what vLLM may use of one GPU?
    shortfall: str | None = None  # why no KV memory is left (weights alone, or weights + overheads)
    vllm_concurrency_note: str | None = None  # why vLLM's "Maximum concurrency" differs from kvplan's


def fit_on_gpu(layout: KvLayout, spec: ModelSpec, ctx: int, n: int, prefix: int, engine: EngineArgs,
               max_model_len: int) -> Fit:
    """`n` requests of `ctx` tokens (a `prefix`-token prefix shared) on the GPU of `engine`."""
    # vLLM's budget (kvplan.plan.budget): requested - weights - activation - non-torch [- graphs]
    args = replace(engine, kv_cache_dtype=layout.kv_dtype.name, block_size=layout.block_size,
                   tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp, max_model_len=max_model_len)
    plan = plan_capacity(layout.spec, args)
    available = max(0, plan.available_kv_cache_bytes)
    dp = engine.data_parallel_size  # replicas with a pool each: vLLM's DP load balancer spreads the requests
    per_rank = -(-n // dp)
    needed = layout.batch_bytes_per_gpu(ctx, per_rank, prefix_tokens=prefix)
    most = layout.max_concurrency(ctx, available, prefix_tokens=prefix) * dp
    return Fit(
        engine.gpu,
        engine.gpu_memory_utilization,
        plan.weights_bytes,
        available,
        needed,
        plan.fits and needed <= available,
        most,
        layout.max_tokens(per_rank, available, max_model_len),
        plan,
        weights_fit(plan),
        memory_shortfall(plan),
        concurrency_note(layout, plan, ctx, prefix, most),
    )
