"""`kvplan estimate`: the KV bill for N requests of L tokens, variants, and whether it fits.

Pure computation returning plain dataclasses; the CLI renders them. `to_json` keys are a
stable interface (other tools and CI parse them).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvplan.errors import KvplanError
from kvplan.plan.budget import CapacityPlan, EngineArgs, plan_capacity
from kvplan.plan.fixes import Fix, Recommendation
from kvplan.plan.kv import KvLayout
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec


@dataclass(frozen=True)
class Variant:
    label: str
    kv_bytes_per_token: int
    kv_bytes_per_request: int
    kv_bytes_total: int
    fits: bool | None
    max_concurrency_at_ctx: int | None


@dataclass(frozen=True)
class Fit:
    gpu: GpuSpec
    gpu_memory_utilization: float
    weights_bytes_per_gpu: int
    kv_available_bytes_per_gpu: int
    kv_needed_bytes_per_gpu: int
    fits: bool
    max_concurrency_at_ctx: int
    max_ctx_at_concurrency: int
    capacity: CapacityPlan  # vLLM's memory budget, which the figures above are taken from


@dataclass(frozen=True)
class Estimate:
    spec: ModelSpec
    layout: KvLayout
    ctx_tokens: int
    concurrency: int
    max_model_len: int
    prefix_tokens: int
    kv_bytes_per_request: int
    kv_bytes_per_request_exact: int
    kv_bytes_per_request_all_full: int
    kv_bytes_total: int
    kv_bytes_total_contiguous: int
    weights_bytes: int
    fit: Fit | None
    variants: tuple[Variant, ...]
    warnings: tuple[str, ...] = field(default=())


def _fit(layout: KvLayout, spec: ModelSpec, ctx: int, n: int, prefix: int, gpu: GpuSpec, util: float,
         max_model_len: int, engine: EngineArgs | None = None) -> Fit:
    # vLLM's budget (kvplan.plan.budget): requested - weights - activation - non-torch [- graphs]
    args = replace(engine or EngineArgs(gpu_memory_utilization=util), gpu=gpu, kv_cache_dtype=layout.kv_dtype.name,
                   block_size=layout.block_size, tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp)
    plan = plan_capacity(layout.spec, args)
    available = max(0, plan.available_kv_cache_bytes)
    needed = layout.batch_bytes_per_gpu(ctx, n, prefix_tokens=prefix)
    return Fit(gpu, util, plan.weights_bytes, available, needed, needed <= available,
               layout.max_concurrency(ctx, available, prefix_tokens=prefix), layout.max_tokens(n, available, max_model_len),
               plan)


def estimate(spec: ModelSpec, *, ctx_tokens: int, concurrency: int, kv_cache_dtype: str = "auto", block_size: int = 16,
             tp: int = 1, pp: int = 1, prefix_tokens: int = 0, max_model_len: int | None = None,
             gpu: GpuSpec | None = None, gpu_memory_utilization: float = 0.9,
             engine_args: EngineArgs | None = None) -> Estimate:
    if ctx_tokens <= 0:
        raise KvplanError(f"--ctx must be a positive number of tokens, got {ctx_tokens}")
    if concurrency <= 0:
        raise KvplanError(f"--concurrency must be positive, got {concurrency}")
    if prefix_tokens < 0:
        raise KvplanError(f"--prefix-tokens must be >= 0, got {prefix_tokens}")
    if prefix_tokens > ctx_tokens:
        raise KvplanError(f"--prefix-tokens {prefix_tokens} is longer than --ctx {ctx_tokens}")
    if not 0 < gpu_memory_utilization <= 1:
        raise KvplanError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    layout = KvLayout.of(spec, kv_cache_dtype, block_size, tp, pp)
    mml = max_model_len or max(spec.max_position_embeddings, ctx_tokens)
    warnings = []
    if ctx_tokens > spec.max_position_embeddings:
        warnings.append(f"--ctx {ctx_tokens} exceeds {spec.name}'s max_position_embeddings "
                        f"({spec.max_position_embeddings}); the model was not trained for it")
    if max_model_len and ctx_tokens > max_model_len:
        raise KvplanError(f"--ctx {ctx_tokens} is longer than --max-model-len {max_model_len}")

    def variant(label: str, lay: KvLayout, prefix: int = 0) -> Variant:
        total = lay.batch_bytes(ctx_tokens, concurrency, prefix_tokens=prefix)
        fits = maxc = None
        if gpu is not None:
            f = _fit(lay, spec, ctx_tokens, concurrency, prefix, gpu, gpu_memory_utilization, mml, engine_args)
            fits, maxc = f.fits, f.max_concurrency_at_ctx
        return Variant(label, lay.bytes_per_token(), lay.request_bytes(ctx_tokens), total, fits, maxc)

    variants = [variant(f"as asked ({layout.kv_dtype.name} KV)", layout)]
    for alt in ("fp8", "int4"):
        if layout.kv_dtype.name != alt:
            variants.append(variant(f"{alt} KV", KvLayout.of(spec, alt, block_size, tp, pp)))
    if not spec.is_mla and spec.num_kv_heads == spec.num_attention_heads and spec.num_kv_heads % 2 == 0:
        gqa = spec.with_kv_heads(spec.num_kv_heads // 2)
        variants.append(variant(f"GQA: KV heads halved ({spec.num_kv_heads} -> {spec.num_kv_heads // 2})",
                                KvLayout.of(gqa, kv_cache_dtype, block_size, tp, pp)))
    share = prefix_tokens or min(ctx_tokens // 2, 1024)
    if concurrency > 1 and share >= block_size:
        variants.append(variant(f"shared {share}-token prefix", layout, share))

    return Estimate(
        spec=spec, layout=layout, ctx_tokens=ctx_tokens, concurrency=concurrency, max_model_len=mml,
        prefix_tokens=prefix_tokens, kv_bytes_per_request=layout.request_bytes(ctx_tokens),
        kv_bytes_per_request_exact=layout.request_bytes(ctx_tokens, paged=False),
        kv_bytes_per_request_all_full=layout.request_bytes_all_full(ctx_tokens),
        kv_bytes_total=layout.batch_bytes(ctx_tokens, concurrency, prefix_tokens=prefix_tokens),
        kv_bytes_total_contiguous=concurrency * layout.contiguous_request_bytes(mml),
        weights_bytes=spec.weights_bytes,
        fit=_fit(layout, spec, ctx_tokens, concurrency, prefix_tokens, gpu, gpu_memory_utilization, mml, engine_args) if gpu else None,
        variants=tuple(variants), warnings=tuple(warnings),
    )


def to_json(est: Estimate, fixes: Sequence[Fix] = (), rec: Recommendation | None = None) -> dict[str, Any]:
    """Stable keys; bytes are integers. With a GPU: vLLM's capacity keys and `fixes`; with a
    recommendation: the `vllm serve` line that meets the target."""
    lay, spec = est.layout, est.spec
    out: dict[str, Any] = {
        "model": spec.name, "hf_id": spec.hf_id, "ctx": est.ctx_tokens, "concurrency": est.concurrency,
        "kv_cache_dtype": lay.kv_dtype.name, "block_size": lay.block_size, "tp": lay.tp, "pp": lay.pp,
        "max_model_len": est.max_model_len, "prefix_tokens": est.prefix_tokens,
        "num_layers": spec.num_layers, "attention_layers": spec.attention_kinds,
        "kv_bytes_per_token": lay.bytes_per_token(), "kv_bytes_per_token_per_gpu": lay.bytes_per_token_per_gpu(),
        "kv_bytes_per_block": lay.bytes_per_block(),
        "kv_bytes_per_request": est.kv_bytes_per_request,
        "kv_bytes_per_request_exact": est.kv_bytes_per_request_exact,
        "kv_bytes_per_request_all_layers_full": est.kv_bytes_per_request_all_full,
        "kv_bytes_total": est.kv_bytes_total, "kv_bytes_total_contiguous": est.kv_bytes_total_contiguous,
        "weights_bytes": est.weights_bytes, "num_parameters": spec.params.total, "dtype": spec.dtype,
        "weight_quantization": spec.quant.method,
        "variants": [v.__dict__ for v in est.variants], "warnings": list(est.warnings),
    }
    if est.fit:
        f = est.fit
        out.update({
            "gpu": f.gpu.name, "gpu_memory_bytes": f.gpu.memory_bytes, "gpu_memory_utilization": f.gpu_memory_utilization,
            "weights_bytes_per_gpu": f.weights_bytes_per_gpu, "kv_available_bytes_per_gpu": f.kv_available_bytes_per_gpu,
            "kv_needed_bytes_per_gpu": f.kv_needed_bytes_per_gpu, "fits": f.fits,
            "max_concurrency_at_ctx": f.max_concurrency_at_ctx, "max_ctx_at_concurrency": f.max_ctx_at_concurrency,
        })
        out.update(capacity_json(f.capacity))
        out["vllm_fixes"] = [{"rank": x.rank, "fix": x.title, "flags": x.flags, "effect": x.effect, "enough": x.fits,
                              "risk": x.risk} for x in fixes]
    if rec is not None:
        out["recommended_command"] = rec.command if rec.met else None
        out["recommendation"] = rec.note
    return out


def capacity_json(plan: CapacityPlan) -> dict[str, Any]:
    """The vLLM capacity keys of `kvplan estimate --json` (per GPU; bytes are integers). The per-GPU
    weights as vLLM loads them are `weights_bytes_per_gpu`; `weights_bytes` is the whole model."""
    return {
        "activation_bytes": plan.activation_bytes,
        "non_torch_bytes": plan.non_torch_bytes, "cudagraph_bytes": plan.cudagraph_bytes,
        "cudagraph_subtracted": plan.cudagraph_subtracted, "requested_bytes": plan.requested_bytes,
        "available_kv_cache_bytes": plan.available_kv_cache_bytes, "num_gpu_blocks": plan.num_gpu_blocks,
        "kv_cache_tokens": plan.kv_cache_tokens, "max_concurrency": round(plan.max_concurrency, 4),
        "vllm_max_model_len": plan.max_model_len, "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens, "vllm_version": ".".join(map(str, plan.version)),
        "vllm_fits": plan.fits, "vllm_error": plan.error, "estimated_max_model_len": plan.estimated_max_model_len,
    }
