"""When a plan does not fit (or misses `--target-concurrency`): the quantified fixes, each
re-planned with `plan_capacity`, ranked by the GPUs they need, then how invasive they are. On the
GPU asked about: first --max-model-len, then the --gpu-memory-utilization headroom, then
--max-num-seqs; then a GQA model; then KV quantization, then weight quantization; then more GPUs
of the same kind (TP, PP, and combinations with fp8 KV or weights that need fewer GPUs); only then
a bigger GPU. When the weights alone do not fit, only fixes that make them fit are listed.
"""
from __future__ import annotations

from dataclasses import replace

from kvplan.plan import overheads as oh
from kvplan.plan.budget import CapacityPlan
from kvplan.plan.engine_args import RUNTIME_QUANTIZATIONS, EngineArgs
from kvplan.plan.explain import weights_fit
from kvplan.plan.kv import largest_fitting
from kvplan.plan.replan import (
    SCORE_FP8_KV,
    SCORE_FP8_WEIGHTS,
    SCORE_INT4_WEIGHTS,
    SCORE_PP,
    UTIL_STEP,
    Fix,
    Recommendation,
    make_fix,
    min_utilization,
    ok,
    safe_max_utilization,
    tokens_text,
    try_plan,
)
from kvplan.plan.search import combined_fixes, planned_serve_line, recommend
from kvplan.spec.gpu import gpu_catalog
from kvplan.spec.model import ModelSpec
from kvplan.spec.quant import make_quant
from kvplan.units import GIB

__all__ = ["Fix", "Recommendation", "UTIL_STEP", "fixes_for", "min_utilization", "planned_serve_line", "recommend",
           "safe_max_utilization"]


def _max_len_for(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> int:
    """Longest max_model_len that fits (vLLM's estimate) and, with a target, serves `target` requests."""
    if target is None:
        return plan.estimated_max_model_len if not plan.fits else plan.max_model_len

    def fits(length: int) -> bool:
        p = try_plan(spec, args, max_model_len=length)
        return p is not None and ok(p, target)

    return largest_fitting(0, plan.max_model_len, fits)


def _fix_max_model_len(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> Fix:
    length = _max_len_for(spec, args, plan, target)
    if length <= 0:
        return make_fix(
            "shorter context",
            "",
            "no max_model_len fits: the weights and activations leave no KV memory",
            None,
            target,
            same_workload=False,
        )
    p = try_plan(spec, args, max_model_len=length)
    return make_fix(
        "shorter context",
        f"--max-model-len {length}",
        f"{plan.max_model_len:,} -> {length:,} tokens per request" + (f": {tokens_text(p)}" if p else ""),
        p,
        target,
        order=0,
        same_workload=False,
    )


def _fix_utilization(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None, goal: str) -> Fix:
    """The headroom vLLM leaves unused; above the safe limit the risk says what no longer fits."""
    safe = safe_max_utilization(plan)
    found = min_utilization(spec, args, target, upto=1.0)
    if not found:
        p = try_plan(spec, args, gpu_memory_utilization=round(min(max(safe, args.gpu_memory_utilization), 1.0), 2))
        return make_fix(
            "more of the GPU for vLLM",
            "",
            f"even {max(safe, args.gpu_memory_utilization):.2f} is not enough for "
            f"{goal}" + (f" ({tokens_text(p)})" if p and p.fits else ""),
            None,
            target,
            order=1,
        )
    util, p = found
    risk = (
        f"above ~{safe:.2f} the CUDA context ({oh.CUDA_CONTEXT_BYTES / GIB:.2f} GiB)"
        + (", NCCL set-up" if plan.tp > 1 else "")
        + (
            ""
            if plan.cudagraph_subtracted
            else f" and CUDA graphs ({plan.cudagraph_bytes / GIB:.2f} GiB, not budgeted before vLLM 0.21)"
        )
        + " no longer fit: OOM at start-up or graph capture, and nothing is left for other processes"
    )
    return make_fix(
        "more of the GPU for vLLM",
        f"--gpu-memory-utilization {util:.2f}",
        f"{args.gpu_memory_utilization:g} -> {util:.2f} "
        f"(+{(util - args.gpu_memory_utilization) * (plan.gpu_memory_bytes or 0) / GIB:.2f} GiB): {tokens_text(p)}",
        p,
        target,
        risk if util > safe else f"safe: stays below ~{safe:.2f}",
        order=1,
    )


def _fix_max_num_seqs(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> Fix | None:
    """Fewer sequences shrink the sampler's share of the activation peak (not the forward pass)."""
    candidates = sorted(
        {n for n in (target or 0, 256, 128, 64, 32, 16) if max(0, target or 0) <= n < plan.max_num_seqs and n > 0},
        reverse=True,
    )  # never below the target: vLLM would run fewer requests at once
    best = None
    for n in candidates:
        p = try_plan(spec, args, max_num_seqs=n)
        if p is not None and ok(p, target):
            best = (n, p)
            break
    if best is None and candidates:
        last = try_plan(spec, args, max_num_seqs=candidates[-1])
        best = (candidates[-1], last) if last is not None else None
    if best is None:
        return None
    n, p = best
    freed = plan.activation_bytes - p.activation_bytes
    if freed <= 0:
        return make_fix(
            "fewer concurrent sequences",
            "",
            f"no gain: the forward pass over {plan.max_num_batched_tokens:,} "
            "batched tokens, not the sampler, sets the activation peak",
            None,
            target,
            order=2,
        )
    return make_fix(
        "fewer concurrent sequences",
        f"--max-num-seqs {n}",
        f"{plan.max_num_seqs} -> {n}: sampler activation -{freed / GIB:.2f} GiB, {tokens_text(p)}",
        p,
        target,
        order=2,
    )


def _fix_fp8_kv(spec: ModelSpec, args: EngineArgs, target: int | None) -> Fix | None:
    kv = spec.kv_dtype(args.kv_cache_dtype, spec.served_dtype(args.dtype))
    p = try_plan(spec, args, kv_cache_dtype="fp8") if kv.bits > 8 else None
    if p is None:
        return None
    return make_fix("quantize the KV cache", "--kv-cache-dtype fp8",
                f"{kv.bits // 8} -> 1 byte per element: tokens x{kv.bits // 8}, {tokens_text(p)}", p, target,
                "small accuracy loss; check extraction of exact numbers/dates", order=4, score=SCORE_FP8_KV)


def _fix_weight_quant(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> list[Fix]:
    """fp8 weights (vLLM quantizes them at load); when that is not enough, a 4-bit checkpoint."""
    if spec.quant.method != "none" or args.quantization:
        return []
    out: list[Fix] = []
    for method, title, score, risk in (
            ("fp8", "quantize the weights", SCORE_FP8_WEIGHTS, "quantized at load: small accuracy loss"),
            ("awq", "a 4-bit weight checkpoint", SCORE_INT4_WEIGHTS,
             "needs an AWQ (or GPTQ) 4-bit checkpoint of the model: vLLM cannot quantize to 4 bits at load; "
             "larger accuracy loss than fp8")):
        # fp8: vLLM quantizes at load; awq: the model's own AWQ checkpoint (vLLM refuses awq at load)
        p = (try_plan(spec, args, quantization=method) if method in RUNTIME_QUANTIZATIONS else
             try_plan(replace(spec, quant=make_quant(method), checkpoint_weights_bytes=None), args))
        if p is None:
            continue
        before, after = plan.weights_bytes / GIB, p.weights_bytes / GIB
        out.append(
            make_fix(
                title,
                f"--quantization {method}",
                f"weights {before:.1f} -> {after:.1f} GiB per GPU: {tokens_text(p)}",
                p,
                target,
                risk,
                order=5 + len(out),
                score=score,
            )
        )
        if out[-1].fits:
            break
    return out


def _fix_parallel(spec: ModelSpec, args: EngineArgs, target: int | None, pipeline: bool) -> Fix | None:
    """The smallest TP (or PP) of 2, 4, 8 times the current one that is enough, else the largest
    valid one (TP sizes must divide the attention heads and divide or be a multiple of the KV heads)."""
    now = args.pipeline_parallel_size if pipeline else args.tensor_parallel_size
    field, label = ("pipeline_parallel_size", "pipeline") if pipeline else ("tensor_parallel_size", "tensor")
    last = None
    for size in (2 * now, 4 * now, 8 * now):
        p = try_plan(spec, args, **{field: size})
        if p is None:
            continue
        last = (size, p)
        if ok(p, target):
            break
    if last is None:
        return None
    size, p = last
    what = "layers split over" if pipeline else "weights and KV heads split over"
    return make_fix(f"{label} parallelism", f"--{label}-parallel-size {size}",
                f"{what} {size} GPUs (+NCCL buffers): {tokens_text(p)} per GPU pool", p, target,
                order=8 if pipeline else 7, score=SCORE_PP if pipeline else 0)


def _fix_bigger_gpu(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> Fix | None:
    """The smallest catalog GPU larger than this one that serves the goal."""
    for gpu in sorted((g for g in gpu_catalog().values() if g.cuda_total_bytes), key=lambda g: g.memory_bytes):
        if gpu.memory_bytes <= (plan.gpu_memory_bytes or 0):
            continue
        p = try_plan(spec, args, gpu=gpu)
        if p is not None and ok(p, target):
            return make_fix(
                "a bigger GPU",
                f"--gpu {gpu.name}",
                f"{gpu.display_name or gpu.name} ({gpu.memory_gib:.2f} GiB): {tokens_text(p)}",
                p,
                target,
                order=9,
                gpu_name=gpu.name,
            )
    return None


def fixes_for(
    spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target_concurrency: int | None = None
) -> tuple[Fix, ...]:
    """Ranked fixes, each quantified by re-planning: by GPU kind (the one asked about first), GPUs
    needed, then how invasive; combinations are listed when they need fewer GPUs or are less
    invasive than every single fix found so far. Only changes to how this model is served: a
    different model (a GQA sibling) is a what-if of the variants table, never a ranked fix."""
    target = target_concurrency
    if ok(plan, target) or plan.gpu_memory_bytes is None:
        return ()
    goal = f"{target} requests of {plan.max_model_len:,}" if target else f"one {plan.max_model_len:,}-token request"
    found = [_fix_max_model_len(spec, args, plan, target), _fix_utilization(spec, args, plan, target, goal),
             _fix_max_num_seqs(spec, args, plan, target), _fix_fp8_kv(spec, args, target),
             *_fix_weight_quant(spec, args, plan, target), _fix_parallel(spec, args, target, pipeline=False),
             _fix_parallel(spec, args, target, pipeline=True)]
    singles = [f for f in found if f is not None]
    singles += combined_fixes(spec, args, target, singles)
    bigger = _fix_bigger_gpu(spec, args, plan, target)
    if bigger is not None:
        singles.append(bigger)
    if not weights_fit(plan):  # only what makes the weights fit
        singles = [f for f in singles if f.plan is not None and weights_fit(f.plan)]
    ranked = sorted(singles, key=lambda f: (bool(f.gpu_name), f.gpus, f.order))
    return tuple(replace(f, rank=rank) for rank, f in enumerate(ranked, start=1))
