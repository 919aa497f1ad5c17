"""`step_cost`: the one factory of GPU step costs (kvplan.perf.step_cost's interface) for predict, plan and a
GPU stress run: the datasheet roofline (`--perf-model roofline`), the measured vLLM kernels (`kernels`), or
`auto`: the kernels where aiconfigurator-core is installed and times the GPU, else the roofline."""
from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.errors import KvplanError
from kvplan.perf.gpu_cost import Coefficients, GpuStepModel
from kvplan.perf.kernel_tables import kernels_missing

if TYPE_CHECKING:
    from kvplan.perf.kernel_cost import KernelStepModel
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.spec.model import ModelSpec

PERF_MODELS = ("roofline", "kernels", "auto")


def resolve_perf_model(perf_model: str, gpu_name: str) -> tuple[str, str]:
    """(the perf model that times `gpu_name`, why): `auto` is the measured kernels where they hold
    the GPU, else the roofline, and says which and why; `kernels` on a GPU they do not hold is
    refused by the kernel model itself (one line, never a silent fallback)."""
    if perf_model == "roofline":
        return "roofline", "roofline (--perf-model roofline: datasheet and kvplan's global coefficients)"
    if perf_model == "kernels":
        return "kernels", "kernels (--perf-model kernels: aiconfigurator-core's measured vLLM kernels)"
    why = kernels_missing(gpu_name)
    if why is None:
        return "kernels", "kernels (--perf-model auto: aiconfigurator-core's measured vLLM kernels hold this GPU)"
    return "roofline", f"roofline (--perf-model auto: {why})"


def step_cost(spec: ModelSpec, args: EngineArgs, coefficients: Coefficients | None = None,
              perf_model: str = "roofline") -> GpuStepModel | KernelStepModel:
    """The GPU step cost of `spec` served with `args`: the datasheet roofline, the measured kernels
    (aiconfigurator-core's vLLM tables), or "auto": the kernels when the GPU has them, else the roofline."""
    if args.gpu is None:
        raise KvplanError("a time prediction needs --gpu NAME (see `kvplan gpus`)")
    if perf_model not in PERF_MODELS:
        raise KvplanError(f"unknown --perf-model {perf_model!r}; choices: {', '.join(PERF_MODELS)}")
    kw = dict(tp=args.tensor_parallel_size, pp=args.pipeline_parallel_size, dtype=args.dtype,
              quantization=args.quantization, kv_cache_dtype=args.kv_cache_dtype, vllm_version=args.vllm_version,
              enforce_eager=args.enforce_eager, coefficients=coefficients, dp=args.data_parallel_size)
    if resolve_perf_model(perf_model, args.gpu.name)[0] == "roofline":
        return GpuStepModel.build(spec, args.gpu, **kw)  # type: ignore[arg-type]
    from kvplan.perf.kernel_cost import KernelStepModel

    return KernelStepModel.build(spec, args.gpu, expert_parallel=args.enable_expert_parallel,
                                 max_num_seqs=args.max_num_seqs, async_scheduling=args.schedules_async,
                                 **kw)  # type: ignore[arg-type]
