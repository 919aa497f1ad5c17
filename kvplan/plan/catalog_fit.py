"""Which catalog GPUs a request fits, for `kvplan estimate` without `--gpu`: for each CUDA GPU of the
catalog, the smallest tensor-parallel size (the one asked, else 2, 4, 8) whose vLLM budget holds
the batch, and the largest concurrency there. A GPU on which no such size fits says how many
requests its largest size holds (0: not even the weights)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from kvplan.errors import KvplanError
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.fit import fit_on_gpu
from kvplan.plan.kv import KvLayout
from kvplan.spec.gpu import GpuSpec, gpu_catalog
from kvplan.spec.model import ModelSpec

TP_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class GpuFit:
    gpu: GpuSpec
    tp: int  # the smallest size that fits, else the largest tried
    fits: bool
    max_concurrency_at_ctx: int  # at `tp` (0 where vLLM would not start)


def catalog_fits(spec: ModelSpec, engine: EngineArgs, ctx: int, concurrency: int, prefix: int, max_model_len: int,
                 state_copies: int) -> tuple[GpuFit, ...]:
    """One row per CUDA GPU of the catalog (in catalog order); GPUs without a CUDA size (Apple) are left out."""
    sizes = [engine.tensor_parallel_size] + [t for t in TP_SIZES if t > engine.tensor_parallel_size]
    rows = []
    for gpu in gpu_catalog().values():
        if not gpu.cuda_total_bytes:
            continue
        row = None
        for tp in sizes:
            try:
                layout = KvLayout.of(spec, engine.kv_cache_dtype, engine.block_size, tp,
                                     engine.pipeline_parallel_size, state_copies)
                args = replace(engine, gpu=gpu, tensor_parallel_size=tp)
                fit = fit_on_gpu(layout, spec, ctx, concurrency, prefix, args, max_model_len)
            except KvplanError:  # a TP size the model cannot be split over
                continue
            row = GpuFit(gpu, tp, fit.fits, fit.max_concurrency_at_ctx if fit.capacity.fits else 0)
            if fit.fits:
                break
        if row is not None:
            rows.append(row)
    return tuple(rows)
