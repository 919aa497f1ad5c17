"""What every fix and recommendation shares: the `Fix` and `Recommendation` records, re-planning one
change with `plan_capacity`, the goal test, the safe utilization limit and the one-line summary of a
re-planned capacity."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvplan.errors import KvplanError
from kvplan.plan.budget import CapacityPlan, plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.explain import weights_fit, weights_per_gpu_bytes
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec
from kvplan.units import GIB

UTIL_STEP = 0.01
SAFETY_MARGIN_BYTES = 150 * 2**20  # vLLM's own utilization suggestion keeps 150 MiB spare

# How invasive a change is (0: flags or more GPUs of the same kind); a combination adds its parts.
SCORE_PP = 1  # pipeline stages (more hops than TP on the same GPU count)
SCORE_FP8_KV = 2  # KV precision
SCORE_FP8_WEIGHTS = 3  # weight precision, quantized when vLLM loads the checkpoint
SCORE_INT4_WEIGHTS = 6  # another (4-bit) checkpoint of the model: more than fp8 KV + fp8 weights


@dataclass(frozen=True)
class Fix:
    rank: int
    title: str
    flags: str  # what to change on the command line ("" when it is not a flag)
    effect: str  # quantified result
    fits: bool  # does this change alone make it fit (and meet the target)?
    risk: str = ""
    plan: CapacityPlan | None = None
    gpus: int = 1  # GPUs the fix runs on (tp x pp)
    gpu_name: str = ""  # another catalog GPU ("" = the GPU asked about)
    order: int = 0  # among fixes on as many GPUs: lower is tried first
    score: int = 0  # how invasive (SCORE_*); 0 for flags and more GPUs of the same kind
    same_workload: bool = True  # False when the fix changes the requests or the model (shorter context, GQA)

    @property
    def max_concurrency(self) -> float | None:
        """vLLM's max concurrency at max_model_len once re-planned (None when vLLM would not start)."""
        return self.plan.max_concurrency if self.plan is not None and self.plan.fits else None


@dataclass(frozen=True)
class Recommendation:
    target_concurrency: int
    met: bool
    gpu: GpuSpec | None
    tensor_parallel_size: int
    plan: CapacityPlan | None
    command: str
    note: str
    pipeline_parallel_size: int = 1

    @property
    def gpus(self) -> int:
        """GPUs the recommended command runs on (tp x pp)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


def ok(plan: CapacityPlan, target: int | None) -> bool:
    """vLLM starts (and, with a target, serves `target` requests of max_model_len)."""
    return plan.fits and (target is None or plan.max_concurrency >= target)


def try_plan(spec: ModelSpec, args: EngineArgs, **changes: Any) -> CapacityPlan | None:
    """`plan_capacity` with `changes`, or None when the change is invalid for this model."""
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


def min_utilization(
    spec: ModelSpec, args: EngineArgs, target: int | None, upto: float = 1.0
) -> tuple[float, CapacityPlan] | None:
    """Smallest utilization (in 0.01 steps, at most `upto`) at which the plan is ok."""
    util = round(max(UTIL_STEP, args.gpu_memory_utilization), 2)
    while util <= upto + 1e-9:
        p = try_plan(spec, args, gpu_memory_utilization=util, kv_cache_memory_bytes=None)
        if p is not None and ok(p, target):
            return util, p
        util = round(util + UTIL_STEP, 2)
    return None


def tokens_text(p: CapacityPlan) -> str:
    """A re-planned capacity in one phrase: KV tokens and vLLM's max concurrency, or why none."""
    if not weights_fit(p):
        return (f"weights {weights_per_gpu_bytes(p) / GIB:.1f} GiB per GPU still exceed "
                f"{p.requested_bytes / GIB:.1f} GiB")
    text = f"{p.kv_cache_tokens:,} KV tokens, max concurrency {p.max_concurrency:.2f}x at {p.max_model_len:,}"
    return text if p.fits else text + " (vLLM would not start at this max_model_len)"


def make_fix(title: str, flags: str, effect: str, p: CapacityPlan | None, target: int | None, risk: str = "",
             **how: object) -> Fix:
    """A fix whose `fits` says whether the re-planned `p` alone is enough; `fixes_for` ranks it."""
    gpus = p.args.tensor_parallel_size * p.args.pipeline_parallel_size if p is not None else 1
    fields = {"gpus": gpus, **how}
    return Fix(0, title, flags, effect, p is not None and ok(p, target), risk, p, **fields)  # type: ignore[arg-type]
