"""When a plan does not fit (or misses `--target-concurrency`): the quantified fixes, cheapest
first (first --max-model-len, then the --gpu-memory-utilization headroom, then --max-num-seqs;
then a GQA model; then KV quantization; only then more or bigger GPUs), and the `vllm serve`
command that meets a target.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kvplan.errors import KvplanError
from kvplan.plan import overheads as oh
from kvplan.plan.budget import CapacityPlan, EngineArgs, plan_capacity
from kvplan.plan.kv import largest_fitting
from kvplan.spec.dtypes import resolve_kv_dtype
from kvplan.spec.gpu import GpuSpec, gpu_catalog
from kvplan.spec.model import ModelSpec
from kvplan.units import GIB

UTIL_STEP = 0.01
SAFETY_MARGIN_BYTES = 150 * 2**20  # vLLM's own utilization suggestion keeps 150 MiB spare


@dataclass(frozen=True)
class Fix:
    rank: int
    title: str
    flags: str  # what to change on the command line ("" when it is not a flag)
    effect: str  # quantified result
    fits: bool  # does this change alone make it fit (and meet the target)?
    risk: str = ""
    plan: CapacityPlan | None = None


@dataclass(frozen=True)
class Recommendation:
    target_concurrency: int
    met: bool
    gpu: GpuSpec | None
    tensor_parallel_size: int
    plan: CapacityPlan | None
    command: str
    note: str


def _ok(plan: CapacityPlan, target: int | None) -> bool:
    return plan.fits and (target is None or plan.max_concurrency >= target)


def _try(spec: ModelSpec, args: EngineArgs, **changes: object) -> CapacityPlan | None:
    try:
        return plan_capacity(spec, replace(args, **changes))
    except KvplanError:
        return None


def safe_max_utilization(plan: CapacityPlan) -> float:
    """Highest utilization that still leaves room for what vLLM does not budget: the CUDA context
    and NCCL set-up (outside the snapshot) and, before v0.21, the CUDA graphs."""
    total = plan.gpu_memory_bytes or 0
    if not total:
        return 1.0
    unbudgeted = plan.init_outside_budget_bytes + (0 if plan.cudagraph_subtracted else plan.cudagraph_bytes)
    return max(0.0, (total - unbudgeted - SAFETY_MARGIN_BYTES) / total)


def _tokens(p: CapacityPlan) -> str:
    return f"{p.kv_cache_tokens:,} KV tokens, {p.max_concurrency:.2f}x at {p.max_model_len:,}"


def _max_len_for(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> int:
    """Longest max_model_len that fits (vLLM's estimate) and, with a target, serves `target` requests."""
    if target is None:
        return plan.estimated_max_model_len if not plan.fits else plan.max_model_len

    def fits(length: int) -> bool:
        p = _try(spec, args, max_model_len=length)
        return p is not None and _ok(p, target)

    return largest_fitting(0, plan.max_model_len, fits)


def min_utilization(spec: ModelSpec, args: EngineArgs, target: int | None, upto: float = 1.0) -> tuple[float, CapacityPlan] | None:
    """Smallest utilization (in 0.01 steps, at most `upto`) at which the plan is ok."""
    util = round(max(UTIL_STEP, args.gpu_memory_utilization), 2)
    while util <= upto + 1e-9:
        p = _try(spec, args, gpu_memory_utilization=util, kv_cache_memory_bytes=None)
        if p is not None and _ok(p, target):
            return util, p
        util = round(util + UTIL_STEP, 2)
    return None


def _fix(title: str, flags: str, effect: str, p: CapacityPlan | None, target: int | None, risk: str = "") -> Fix:
    """A fix whose `fits` says whether the re-planned `p` alone is enough; `fixes_for` ranks it."""
    return Fix(0, title, flags, effect, p is not None and _ok(p, target), risk, p)


def _fix_max_model_len(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> Fix:
    length = _max_len_for(spec, args, plan, target)
    if length <= 0:
        return _fix("shorter context", "", "no max_model_len fits: the weights and activations leave no KV memory", None, target)
    p = _try(spec, args, max_model_len=length)
    return _fix("shorter context", f"--max-model-len {length}",
                f"{plan.max_model_len:,} -> {length:,} tokens per request" + (f": {_tokens(p)}" if p else ""), p, target)


def _fix_utilization(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None, goal: str) -> Fix:
    """The headroom vLLM leaves unused; above the safe limit the risk says what no longer fits."""
    safe = safe_max_utilization(plan)
    found = min_utilization(spec, args, target, upto=1.0)
    if not found:
        p = _try(spec, args, gpu_memory_utilization=round(min(max(safe, args.gpu_memory_utilization), 1.0), 2))
        return _fix("more of the GPU for vLLM", "", f"even {max(safe, args.gpu_memory_utilization):.2f} is not enough for "
                    f"{goal}" + (f" ({_tokens(p)})" if p and p.fits else ""), None, target)
    util, p = found
    risk = (f"above ~{safe:.2f} the CUDA context ({oh.CUDA_CONTEXT_BYTES / GIB:.2f} GiB)"
            + (", NCCL set-up" if plan.tp > 1 else "")
            + ("" if plan.cudagraph_subtracted else f" and CUDA graphs ({plan.cudagraph_bytes / GIB:.2f} GiB, not budgeted before vLLM 0.21)")
            + " no longer fit: OOM at start-up or graph capture, and nothing is left for other processes")
    return _fix("more of the GPU for vLLM", f"--gpu-memory-utilization {util:.2f}",
                f"{args.gpu_memory_utilization:g} -> {util:.2f} (+{(util - args.gpu_memory_utilization) * plan.gpu_memory_bytes / GIB:.2f} GiB): {_tokens(p)}",
                p, target, risk if util > safe else f"safe: stays below ~{safe:.2f}")


def _fix_max_num_seqs(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> Fix | None:
    """Fewer sequences shrink the sampler's share of the activation peak (not the forward pass)."""
    candidates = sorted({n for n in (target or 0, 256, 128, 64, 32, 16) if 0 < n < plan.max_num_seqs}, reverse=True)
    best = None
    for n in candidates:
        p = _try(spec, args, max_num_seqs=n)
        if p is not None and _ok(p, target):
            best = (n, p)
            break
    if best is None and candidates:
        n = candidates[-1]
        best = (n, _try(spec, args, max_num_seqs=n))
    if not (best and best[1]):
        return None
    n, p = best
    freed = plan.activation_bytes - p.activation_bytes
    if freed <= 0:
        return _fix("fewer concurrent sequences", "", f"no gain: the forward pass over {plan.max_num_batched_tokens:,} "
                    "batched tokens, not the sampler, sets the activation peak", None, target)
    return _fix("fewer concurrent sequences", f"--max-num-seqs {n}",
                f"{plan.max_num_seqs} -> {n}: sampler activation -{freed / GIB:.2f} GiB, {_tokens(p)}", p, target)


def _fix_gqa(spec: ModelSpec, args: EngineArgs, target: int | None) -> Fix | None:
    """Only for a multi-head model with enough heads that a GQA sibling is plausible."""
    if spec.is_mla or spec.num_kv_heads != spec.num_attention_heads or spec.num_kv_heads < 8:
        return None
    heads = max(spec.num_kv_heads // 4, args.tensor_parallel_size)
    p = _try(spec.with_kv_heads(heads), args)
    if p is None:
        return None
    return _fix("serve a GQA model", "--model <a GQA sibling>",
                f"{spec.num_kv_heads} -> {heads} KV heads (e.g. Llama-2 -> Llama-3 style): KV per token "
                f"/{spec.num_kv_heads // heads}, {_tokens(p)}", p, target)


def _fix_fp8_kv(spec: ModelSpec, args: EngineArgs, target: int | None) -> Fix | None:
    kv = resolve_kv_dtype(args.kv_cache_dtype, oh.model_dtype(spec, args.dtype))
    p = _try(spec, args, kv_cache_dtype="fp8") if kv.bits > 8 else None
    if p is None:
        return None
    return _fix("quantize the KV cache", "--kv-cache-dtype fp8",
                f"{kv.bits // 8} -> 1 byte per element: tokens x{kv.bits // 8}, {_tokens(p)}", p, target,
                "small accuracy loss; check extraction of exact numbers/dates")


def _fix_tensor_parallel(spec: ModelSpec, args: EngineArgs, target: int | None) -> Fix | None:
    tp2 = args.tensor_parallel_size * 2
    p = _try(spec, args, tensor_parallel_size=tp2)
    if p is None:
        return None
    return _fix("tensor parallelism", f"--tensor-parallel-size {tp2}",
                f"weights and KV heads split over {tp2} GPUs (+NCCL buffers): {_tokens(p)} per GPU pool", p, target)


def _fix_bigger_gpu(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None) -> Fix | None:
    """The smallest catalog GPU larger than this one that serves the goal."""
    for gpu in sorted((g for g in gpu_catalog().values() if g.cuda_total_bytes), key=lambda g: g.memory_bytes):
        if gpu.memory_bytes <= plan.gpu_memory_bytes:
            continue
        p = _try(spec, args, gpu=gpu)
        if p is not None and _ok(p, target):
            return _fix("a bigger GPU", f"--gpu {gpu.name}", f"{gpu.display_name or gpu.name} ({gpu.memory_gib:.2f} GiB): {_tokens(p)}",
                        p, target)
    return None


def fixes_for(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target_concurrency: int | None = None) -> tuple[Fix, ...]:
    """Ranked fixes, cheapest first, each quantified by re-planning with the one change."""
    target = target_concurrency
    if _ok(plan, target) or plan.gpu_memory_bytes is None:
        return ()
    goal = f"{target} requests of {plan.max_model_len:,}" if target else f"one {plan.max_model_len:,}-token request"
    found = (_fix_max_model_len(spec, args, plan, target), _fix_utilization(spec, args, plan, target, goal),
             _fix_max_num_seqs(spec, args, plan, target), _fix_gqa(spec, args, target), _fix_fp8_kv(spec, args, target),
             _fix_tensor_parallel(spec, args, target), _fix_bigger_gpu(spec, args, plan, target))
    return tuple(replace(f, rank=rank) for rank, f in enumerate((f for f in found if f is not None), start=1))


def _command(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int) -> str:
    parts = [f"vllm serve {spec.hf_id or spec.name}"]
    if args.kv_cache_memory_bytes is not None:
        needed = (target * plan.blocks_per_request + 1) * plan.block_bytes  # +1: the reserved null block
        parts.append(f"--kv-cache-memory-bytes {needed}")
    else:
        parts.append(f"--gpu-memory-utilization {args.gpu_memory_utilization:.2f}")
    parts += [f"--max-model-len {plan.max_model_len}", f"--max-num-seqs {plan.max_num_seqs}",
              f"--block-size {args.block_size}", f"--kv-cache-dtype {args.kv_cache_dtype}",
              f"--tensor-parallel-size {args.tensor_parallel_size}"]
    if args.pipeline_parallel_size > 1:
        parts.append(f"--pipeline-parallel-size {args.pipeline_parallel_size}")
    if args.dtype != "auto":
        parts.append(f"--dtype {args.dtype}")
    if args.quantization:
        parts.append(f"--quantization {args.quantization}")
    if args.max_num_batched_tokens:
        parts.append(f"--max-num-batched-tokens {args.max_num_batched_tokens}")
    if args.enforce_eager:
        parts.append("--enforce-eager")
    return " ".join(parts)


def _tp_options(spec: ModelSpec, start: int) -> list[int]:
    out = []
    for tp in (start, 2 * start, 4 * start, 8):
        if tp >= start and tp <= 8 and tp not in out and spec.num_attention_heads % tp == 0:
            out.append(tp)
    return out


def recommend(spec: ModelSpec, args: EngineArgs, target_concurrency: int) -> Recommendation:
    """The `vllm serve` line that serves `target_concurrency` requests of max_model_len, on the
    chosen GPU (raising utilization up to its safe limit, then TP), else the smallest catalog
    GPU x TP that can."""
    if target_concurrency <= 0:
        raise KvplanError(f"--target-concurrency must be positive, got {target_concurrency}")
    base = replace(args, max_num_seqs=args.max_num_seqs or target_concurrency)
    if args.kv_cache_memory_bytes is not None:
        p = plan_capacity(spec, replace(base, kv_cache_memory_bytes=None)) if args.gpu else None
        probe = plan_capacity(spec, base)
        needed = (target_concurrency * probe.blocks_per_request + 1) * probe.block_bytes
        ok = p is None or needed <= p.available_kv_cache_bytes
        return Recommendation(target_concurrency, ok, args.gpu, args.tensor_parallel_size, probe,
                              _command(spec, base, probe, target_concurrency),
                              "--kv-cache-memory-bytes sized for exactly the target" + ("" if ok else "; more than the GPU budget allows"))
    for tp in _tp_options(spec, args.tensor_parallel_size):
        a = replace(base, tensor_parallel_size=tp)
        p = _try(spec, a)
        if p is None:
            continue
        found = min_utilization(spec, a, target_concurrency, upto=safe_max_utilization(p))
        if found:
            util, plan = found
            util = max(util, args.gpu_memory_utilization)
            a = replace(a, gpu_memory_utilization=util)
            return Recommendation(target_concurrency, True, args.gpu, tp, plan, _command(spec, a, plan, target_concurrency),
                                  f"on {args.gpu.name if args.gpu else 'the GPU'} with TP {tp}: {_tokens(plan)}")
    options = []
    for gpu in (g for g in gpu_catalog().values() if g.cuda_total_bytes):
        for tp in _tp_options(spec, 1):
            options.append((gpu.memory_bytes * tp, tp, gpu))
    for _, tp, gpu in sorted(options, key=lambda o: (o[0], o[1])):
        a = replace(base, gpu=gpu, tensor_parallel_size=tp, gpu_memory_utilization=0.9)
        p = _try(spec, a)
        if p is not None and _ok(p, target_concurrency):
            return Recommendation(target_concurrency, True, gpu, tp, p, _command(spec, a, p, target_concurrency),
                                  f"the chosen GPU cannot; smallest catalog option: {tp} x {gpu.display_name or gpu.name}: {_tokens(p)}")
    return Recommendation(target_concurrency, False, None, 0, None, "",
                          f"no catalog GPU with TP <= 8 serves {target_concurrency} requests of this length")
