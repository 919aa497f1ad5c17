"""The measured-kernel lookups `KernelStepModel` times its ops with: AIConfigurator's vLLM tables
(`kernel_tables`) filtered to the model's shapes, dtype and parallel split, each as a callable on
log-spaced grids; None where nothing matches (the op falls back to the roofline). Each builder
writes the table it used into `sources`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvplan.perf.kernel_tables import LogGrid
from kvplan.spec.model import ModelSpec

MOE_DISTRIBUTION = "power_law_1.2"  # measured with skewed routing, as real traffic is (else "balanced")


@dataclass(frozen=True)
class MeasuredGemm:
    """A dense GEMM table of one dtype at (m, n, k), split into GPU and host time. An 8-bit GEMM
    reads half the weight bytes of the bf16 one and does its math at least as fast, so it is not
    slower on the GPU: where a table times it above the bf16 kernel (B200 block-fp8: 0.17 ms flat
    from m = 1 to 4096 and across shapes, 30x the bf16 kernel, more than whole measured decode steps
    allow) the excess is per-call host work (Python, scale layout). A CUDA graph does not replay it;
    an eager step's CPU pays it while the GPU runs (`KernelStepModel` times the two side by side)."""

    grid: LogGrid
    plain: LogGrid | None = None  # the bf16 kernel's table (None: this is it, or none was measured)

    def __call__(self, m: float, n: float, k: float) -> float:
        """GPU time (ms): as measured, at most the bf16 kernel's."""
        t = self.grid(m, n, k)
        return min(t, self.plain(m, n, k)) if self.plain is not None else t

    def host(self, m: float, n: float, k: float) -> float:
        """Host time (ms) above the GPU's: what the table measured beyond the bf16 kernel."""
        return max(0.0, self.grid(m, n, k) - self.plain(m, n, k)) if self.plain is not None else 0.0


def gemm_grid(tables: dict, dtype: str | None, sources: dict[str, str]) -> MeasuredGemm | None:
    """The dense GEMM of `dtype` (see `MeasuredGemm`); None where the table has none."""
    ref = tables.get("gemm")
    if ref is None or dtype is None:
        return None
    rows = ref.frame[ref.frame["gemm_dtype"] == dtype]
    if rows.empty:
        return None
    bf16 = ref.frame[ref.frame["gemm_dtype"] == "bfloat16"]
    sources["gemm"] = f"{ref.source} gemm_dtype={dtype}"
    if dtype == "bfloat16" or bf16.empty:
        return MeasuredGemm(LogGrid(rows, ["m", "n", "k"]))
    sources["gemm"] += (" (on the GPU at most the bf16 kernel's time; the rest is host work, hidden in "
                        "CUDA-graph steps and beside the GPU's in eager ones)")
    return MeasuredGemm(LogGrid(rows, ["m", "n", "k"]), LogGrid(bf16, ["m", "n", "k"]))


def attention_grids(tables: dict, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
                     sources: dict[str, str]) -> tuple[Any, Any]:
    out = []
    for name, axes in (("context_attention", ["batch_size", "isl"]), ("generation_attention", ["batch_size", "step"])):
        ref = tables.get(name)
        grid = None
        if ref is not None:
            f = ref.frame
            # older collections (a100_sxm, vLLM 0.14) have no window_size column: full attention only
            full = (f["window_size"] == 0) if "window_size" in f.columns else True
            rows = f[(f["num_heads"] == heads) & (f["num_key_value_heads"] == kv_heads) & (f["head_dim"] == head_dim)
                     & (f["kv_cache_dtype"] == kv_dtype) & full]
            if not rows.empty:
                grid = LogGrid(rows, axes)
                sources[name] = f"{ref.source} heads={heads}/{kv_heads}x{head_dim} kv={kv_dtype}"
        out.append(grid)
    return out[0], out[1]


def moe_grid(tables: dict, spec: ModelSpec, dtype: str | None, split: tuple[int, int], sources: dict[str, str]) -> Any:
    """The fused-MoE kernel for `split` = (moe_tp_size, moe_ep_size), at the group's token count."""
    tp, ep = split
    ref = tables.get("moe")
    n_exp, k, inter, _ = spec.moe_shape
    if ref is None or not n_exp or dtype is None:
        return None
    f = ref.frame
    shape = f[(f["moe_dtype"] == dtype) & (f["hidden_size"] == spec.hidden_size) & (f["inter_size"] == inter)
              & (f["topk"] == k) & (f["num_experts"] == n_exp)]
    # the split itself, else the widest measured one that splits the same way less (tp' | tp, ep' | ep):
    # a GPU then holds tp'ep' / (tp ep) of the measured kernel's weights and does that share of its
    # work, so its time scales by that ratio (both the weight reads and the FLOPs shrink with it)
    splits = sorted({(int(a), int(b)) for a, b in zip(shape["moe_tp_size"], shape["moe_ep_size"])
                     if tp % int(a) == 0 and ep % int(b) == 0}, key=lambda ab: ab[0] * ab[1])
    if not splits:
        return None
    mtp, mep = splits[-1]
    rows = shape[(shape["moe_tp_size"] == mtp) & (shape["moe_ep_size"] == mep)]
    dist = MOE_DISTRIBUTION if (rows["distribution"] == MOE_DISTRIBUTION).any() else "balanced"
    rows = rows[rows["distribution"] == dist]
    grid = LogGrid(rows, ["num_tokens"])
    sources["moe"] = f"{ref.source} {dtype} {n_exp}x{inter} top{k} tp{mtp} ep{mep} {dist}"
    if (mtp, mep) == (tp, ep):
        return grid
    ratio = (mtp * mep) / (tp * ep)
    sources["moe"] += f", scaled by {mtp * mep}/{tp * ep} to tp{tp} ep{ep} (not measured)"
    return lambda tokens: grid(tokens) * ratio


def allreduce_grid(tables: dict, gpus: int, sources: dict[str, str], op: str = "allreduce",
                   graph: bool = True) -> Any:
    """vLLM's custom all-reduce over `gpus`, as measured inside a CUDA graph (`graph`) or launched
    eagerly (a step above the largest captured batch). `op` "moe_allreduce": a MoE layer's
    reduction over the dp x tp group, which vLLM does as an all-gather plus a reduce-scatter of the
    same bytes (the all-reduce's two halves)."""
    ref = tables.get("allreduce")
    if ref is None:
        return None
    f = ref.frame
    rows = f[(f["num_gpus"] == gpus) & (f["backend"] == ("vllm_graph" if graph else "vllm_eager"))]
    if rows.empty:
        return None
    if graph:  # the eager table is the same source, named by the caller beside this one
        sources[op] = f"{ref.source} custom all-reduce x{gpus} (CUDA graph)"
    return LogGrid(rows, ["message_size"])


def dp_dispatch_grid(tables: dict, dp: int, sources: dict[str, str]) -> Callable[[float], float] | None:
    """A MoE layer's exchange across `dp` data-parallel replicas, as vLLM's default all2all backend
    (allgather_reducescatter) does it: an NCCL all-gather of every replica's hidden states before
    the experts and an NCCL reduce-scatter of their outputs after, each of the group's values
    (tokens x hidden, bf16; the table's message size is the whole buffer in elements). None when the
    system has no NCCL table."""
    ref = tables.get("nccl")
    if ref is None:
        return None
    f = ref.frame
    grids = []
    for op in ("all_gather", "reduce_scatter"):
        rows = f[(f["op_name"] == op) & (f["num_gpus"] == dp) & (f["nccl_dtype"] == "half")]
        if rows.empty:
            return None
        grids.append(LogGrid(rows, ["message_size"]))
    sources["moe_allreduce"] = (
        f"{ref.source} all_gather + reduce_scatter x{dp} (bf16) across the data-parallel replicas"
    )
    gather, scatter = grids
    return lambda values: gather(values) + scatter(values)


def collective_grids(tables: dict, tp: int, dp: int, sources: dict[str, str]) -> dict[str, Any]:
    """The step's collectives, as `KernelStepModel` fields: the TP all-reduce (in a CUDA graph and
    eager) and, with `dp` > 1 (a MoE model's replicas), the MoE layers' exchange across them at the
    group's values: NCCL's all-gather + reduce-scatter then each replica's TP all-reduce of its own
    share, or, without those tables, one custom all-reduce's bytes over all dp x tp GPUs."""
    group = tp * dp
    allreduce = allreduce_grid(tables, tp, sources) if tp > 1 else None
    eager_allreduce = allreduce_grid(tables, tp, {}, graph=False) if tp > 1 else None
    dispatch = dp_dispatch_grid(tables, dp, sources) if dp > 1 and (tp == 1 or allreduce is not None) else None
    if dispatch is not None:
        if tp > 1:
            sources["moe_allreduce"] += f"; then each replica's custom all-reduce x{tp}"
        graph, eager = [lambda v, ar=ar: dispatch(v) + (ar(v / dp) if ar is not None else 0.0)
                        for ar in (allreduce, eager_allreduce)]
        # NCCL's table has no graph/eager split: only a replica's TP all-reduce launches differently
        return {"allreduce": allreduce, "eager_allreduce": eager_allreduce, "moe_allreduce": graph,
                "eager_moe_allreduce": eager if eager_allreduce is not None else None}
    pooled = dp > 1 and group > 1
    return {"allreduce": allreduce, "eager_allreduce": eager_allreduce,
            "moe_allreduce": allreduce_grid(tables, group, sources, "moe_allreduce") if pooled else None,
            "eager_moe_allreduce": allreduce_grid(tables, group, {}, graph=False) if pooled else None}
