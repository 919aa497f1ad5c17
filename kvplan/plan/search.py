"""Configurations on more GPUs or with quantization, alone and combined (TP x PP x KV dtype x
weight quantization), ranked by fewest GPUs, then least invasive; the `vllm serve` command that
meets a target, with only flags vLLM accepts.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from kvplan.errors import KvplanError
from kvplan.plan.budget import CapacityPlan, plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.kv import validate_parallel
from kvplan.plan.replan import (
    SCORE_FP8_KV,
    SCORE_FP8_WEIGHTS,
    SCORE_INT4_WEIGHTS,
    SCORE_PP,
    Fix,
    Recommendation,
    make_fix,
    min_utilization,
    ok,
    safe_max_utilization,
    tokens_text,
    try_plan,
)
from kvplan.spec.dtypes import no_vllm_kv_flag_reason, vllm_kv_cache_dtype
from kvplan.spec.gpu import gpu_catalog
from kvplan.spec.model import ModelSpec
from kvplan.spec.quant import VLLM_QUANTIZATION_FLAGS

MAX_TP = 8  # one node
MAX_GPUS = 16  # TP 8 x PP 2
WEIGHT_QUANT_SCORES = {"fp8": SCORE_FP8_WEIGHTS, "awq": SCORE_INT4_WEIGHTS}


@dataclass(frozen=True)
class Option:
    """One configuration: parallel layout, KV dtype and weight quantization."""

    tp: int
    pp: int
    kv_cache_dtype: str
    quantization: str | None
    score: int  # how invasive, SCORE_* summed

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def apply(self, args: EngineArgs) -> EngineArgs:
        return replace(args, tensor_parallel_size=self.tp, pipeline_parallel_size=self.pp,
                       kv_cache_dtype=self.kv_cache_dtype, quantization=self.quantization)

    def changes(self, args: EngineArgs) -> list[tuple[str, str]]:
        """(label, flag) of what differs from `args`."""
        out = []
        if self.kv_cache_dtype != args.kv_cache_dtype:
            out.append((f"{self.kv_cache_dtype} KV", f"--kv-cache-dtype {self.kv_cache_dtype}"))
        if self.quantization != args.quantization:
            out.append((f"{self.quantization} weights", f"--quantization {self.quantization}"))
        if self.tp != args.tensor_parallel_size:
            out.append((f"TP {self.tp}", f"--tensor-parallel-size {self.tp}"))
        if self.pp != args.pipeline_parallel_size:
            out.append((f"PP {self.pp}", f"--pipeline-parallel-size {self.pp}"))
        return out


def _parallel_ok(spec: ModelSpec, tp: int, pp: int) -> bool:
    try:
        validate_parallel(spec, tp, pp)
    except KvplanError:
        return False
    return True


def options(spec: ModelSpec, args: EngineArgs, weight_quants: tuple[str, ...] = ("fp8", "awq")) -> list[Option]:
    """Every configuration from `args` upwards (TP up to 8 that the model's heads allow, PP up to 4,
    fp8 KV, weight quantization of an unquantized checkpoint), fewest GPUs first, then least invasive."""
    tp0, pp0 = args.tensor_parallel_size, args.pipeline_parallel_size
    kv = spec.kv_dtype(args.kv_cache_dtype, spec.served_dtype(args.dtype))
    kvs = [(args.kv_cache_dtype, 0)] + ([("fp8", SCORE_FP8_KV)] if kv.bits > 8 else [])
    quants = [(args.quantization, 0)]
    if spec.quant.method == "none" and not args.quantization:
        quants += [(q, WEIGHT_QUANT_SCORES.get(q, SCORE_INT4_WEIGHTS)) for q in weight_quants]
    out = []
    for tp in sorted({tp0, *(t for t in (1, 2, 4, 8) if tp0 <= t <= MAX_TP)}):
        for pp in sorted({pp0, *(p for p in (1, 2, 4) if p >= pp0)}):
            if tp * pp > max(MAX_GPUS, tp0 * pp0) or not _parallel_ok(spec, tp, pp):
                continue
            for kv_name, kv_score in kvs:
                for q, q_score in quants:
                    out.append(Option(tp, pp, kv_name, q, kv_score + q_score + (SCORE_PP if pp > pp0 else 0)))
    return sorted(out, key=lambda o: (o.gpus, o.score, o.pp))


def combined_fixes(spec: ModelSpec, args: EngineArgs, target: int | None, singles: list[Fix]) -> list[Fix]:
    """Combinations that serve the goal on fewer GPUs, or less invasively, than every fix listed
    so far: per GPU count, the least invasive one that is enough, while it beats what has been found."""
    found = [(f.gpus, f.score) for f in singles if f.fits and f.same_workload and not f.gpu_name]
    out = []
    opts = options(spec, args)
    for n in sorted({o.gpus for o in opts}):
        best = min((s for g, s in found if g <= n), default=None)
        if best == 0:
            break
        for o in (o for o in opts if o.gpus == n and (best is None or o.score < best)):
            p = try_plan(spec, o.apply(args))
            if p is None or not ok(p, target):
                continue
            found.append((n, o.score))
            changes = o.changes(args)
            if len(changes) > 1:  # one change alone is already a single fix
                out.append(make_fix("combined: " + " + ".join(label for label, _ in changes),
                                    " ".join(flag for _, flag in changes), tokens_text(p), p, target,
                                    _combo_risk(o, args), order=20 + o.score, score=o.score))
            break
    return out


def _combo_risk(o: Option, args: EngineArgs) -> str:
    parts = []
    if o.quantization == "awq":
        parts.append("needs a 4-bit AWQ (or GPTQ) checkpoint of the model; vLLM cannot quantize to 4 bits at load")
    elif o.quantization != args.quantization:
        parts.append("fp8 weights quantized at load: small accuracy loss")
    if o.kv_cache_dtype != args.kv_cache_dtype:
        parts.append("fp8 KV: small accuracy loss")
    return "; ".join(parts)


def planned_serve_line(spec: ModelSpec, args: EngineArgs, plan: CapacityPlan, target: int | None = None) -> str:
    """The `vllm serve` line for `args` as planned (`plan`: its pool, max_model_len and max_num_seqs),
    with flags vLLM accepts only (a KV dtype or quantization vLLM has no flag for is left out;
    `recommend` re-plans with one that it has). With a KV byte budget, `target` concurrent requests
    size it; None: the budget given. The one builder of the line for estimate, plan and plan-sessions."""
    parts = [f"vllm serve {spec.serve_arg}"]
    if args.kv_cache_memory_bytes is not None:
        needed = (args.kv_cache_memory_bytes if target is None
                  else (target * plan.blocks_per_request + 1) * plan.block_bytes)  # +1: the reserved null block
        parts.append(f"--kv-cache-memory-bytes {needed}")
    else:
        parts.append(f"--gpu-memory-utilization {args.gpu_memory_utilization:.2f}")
    parts += [
        f"--max-model-len {plan.max_model_len}",
        f"--max-num-seqs {plan.max_num_seqs}",
        f"--block-size {args.block_size}",
    ]
    kv_flag = vllm_kv_cache_dtype(
        spec.kv_dtype(args.kv_cache_dtype, spec.served_dtype(args.dtype)), spec.served_dtype(args.dtype)
    )
    if kv_flag is not None:
        parts.append(f"--kv-cache-dtype {args.kv_cache_dtype if args.kv_cache_dtype == 'auto' else kv_flag}")
    parts.append(f"--tensor-parallel-size {args.tensor_parallel_size}")
    if args.pipeline_parallel_size > 1:
        parts.append(f"--pipeline-parallel-size {args.pipeline_parallel_size}")
    if args.data_parallel_size > 1:
        parts.append(f"--data-parallel-size {args.data_parallel_size}")
    if args.enable_expert_parallel:
        parts.append("--enable-expert-parallel")
    if args.dtype != "auto":
        parts.append(f"--dtype {args.dtype}")
    if args.quantization and args.quantization in VLLM_QUANTIZATION_FLAGS:
        parts.append(f"--quantization {args.quantization}")
    if args.max_num_batched_tokens:
        parts.append(f"--max-num-batched-tokens {args.max_num_batched_tokens}")
    if args.enforce_eager:
        parts.append("--enforce-eager")
    if args.async_scheduling is not None:  # the plan was simulated with it: the server must run the same
        parts.append("--async-scheduling" if args.async_scheduling else "--no-async-scheduling")
    return " ".join(parts)


def servable(spec: ModelSpec, args: EngineArgs) -> tuple[EngineArgs, str]:
    """`args` with a KV dtype `vllm serve` accepts, and what was changed (int8/int4 become fp8,
    a 16-bit KV dtype other than the model's becomes auto)."""
    model = spec.served_dtype(args.dtype)
    kv = spec.kv_dtype(args.kv_cache_dtype, model)
    if vllm_kv_cache_dtype(kv, model) is not None:
        return args, ""
    served = "fp8" if kv.bits <= 8 else "auto"
    return replace(args, kv_cache_dtype=served), f" ({no_vllm_kv_flag_reason(kv, model)}; the command uses {served} KV)"


def _on_chosen_gpu(
    spec: ModelSpec, base: EngineArgs, target: int, util0: float
) -> tuple[EngineArgs, CapacityPlan, Option] | None:
    """The first configuration (fewest GPUs, then least invasive) that meets `target` below the
    safe utilization limit, and the smallest utilization that does."""
    for o in options(spec, base, weight_quants=("fp8",)):  # 4-bit needs another checkpoint: no command for it
        a = o.apply(base)
        p = try_plan(spec, a)
        if p is None:
            continue
        safe = safe_max_utilization(p)
        top = try_plan(spec, a, gpu_memory_utilization=max(util0, round(safe - 0.005, 2)))
        if top is None or not ok(top, target):
            continue
        found = min_utilization(spec, a, target, upto=safe)
        if found:
            util, plan = found
            return replace(a, gpu_memory_utilization=max(util, util0)), plan, o
    return None


def _memory_bytes_recommendation(spec: ModelSpec, base: EngineArgs, target: int, note: str) -> Recommendation:
    p = plan_capacity(spec, replace(base, kv_cache_memory_bytes=None)) if base.gpu else None
    probe = plan_capacity(spec, base)
    needed = (target * probe.blocks_per_request + 1) * probe.block_bytes
    met = p is None or needed <= p.available_kv_cache_bytes
    return Recommendation(
        target,
        met,
        base.gpu,
        base.tensor_parallel_size,
        probe,
        planned_serve_line(spec, base, probe, target),
        "--kv-cache-memory-bytes sized for exactly the target"
        + ("" if met else "; more than the GPU budget allows")
        + note,
    )


def recommend(spec: ModelSpec, args: EngineArgs, target_concurrency: int) -> Recommendation:
    """The `vllm serve` line that serves `target_concurrency` requests of max_model_len: on the
    chosen GPU, the configuration with the fewest GPUs, then the least invasive (TP/PP, fp8 KV,
    fp8 weights, combined; utilization raised up to its safe limit), else the smallest catalog
    GPU x TP that can."""
    if target_concurrency <= 0:
        raise KvplanError(f"--target-concurrency must be positive, got {target_concurrency}")
    served, note = servable(spec, args)
    base = replace(served, max_num_seqs=args.max_num_seqs or target_concurrency)
    if args.kv_cache_memory_bytes is not None:
        return _memory_bytes_recommendation(spec, base, target_concurrency, note)
    found = _on_chosen_gpu(spec, base, target_concurrency, args.gpu_memory_utilization)
    if found:
        a, plan, o = found
        how = " + ".join(label for label, _ in o.changes(args)) or "as asked"
        return Recommendation(
            target_concurrency,
            True,
            args.gpu,
            a.tensor_parallel_size,
            plan,
            planned_serve_line(spec, a, plan, target_concurrency),
            f"on {o.gpus} x {args.gpu.name if args.gpu else 'the GPU'} ({how}): {tokens_text(plan)}" + note,
            a.pipeline_parallel_size,
        )
    choices = [(gpu.memory_bytes * tp, tp, gpu) for gpu in gpu_catalog().values() if gpu.cuda_total_bytes
               for tp in (1, 2, 4, 8) if _parallel_ok(spec, tp, 1)]
    for _, tp, gpu in sorted(choices, key=lambda c: (c[0], c[1])):
        a = replace(base, gpu=gpu, tensor_parallel_size=tp, gpu_memory_utilization=0.9)
        p = try_plan(spec, a)
        if p is not None and ok(p, target_concurrency):
            return Recommendation(
                target_concurrency,
                True,
                gpu,
                tp,
                p,
                planned_serve_line(spec, a, p, target_concurrency),
                f"the chosen GPU cannot; smallest catalog option: {tp} x {gpu.display_name or gpu.name}: "
                f"{tokens_text(p)}"
                + note,
            )
    return Recommendation(target_concurrency, False, None, 0, None, "",
                          f"no catalog GPU with TP <= 8 serves {target_concurrency} requests of this length" + note)
