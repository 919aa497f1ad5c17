"""What each op of a `KernelStepModel` was timed from, as `predict` prints it: the measured table
(system, vLLM version) or the roofline, and what the model assumed beyond the table (eager launches,
norms spanning the TP group, the MoE gate in bf16, collectives wider than one node, the host)."""
from __future__ import annotations

from typing import Any

NODE_GPUS = 8  # GPUs of one HGX/DGX board (NVLink domain); the measured collectives go up to it
ROOFLINE = "roofline (datasheet, kvplan's global coefficients)"


def annotate_sources(model: Any, tables: dict, group: int, standard_kinds: tuple[str, ...]) -> None:
    """Complete a `KernelStepModel`'s `sources` (the grids' builders wrote the tables they used); `group`: the GPUs
    a MoE layer spans, `standard_kinds`: the layer kinds whose projections are timed by shape."""
    sources, tp, dp, captured = model.sources, model.tp, model.dp, model.captured_tokens
    if model.other_weights:  # MLA's projections take the attention table unless the model has mixers
        table = "attention_gemm" if model.attention_gemm is not None and not model.spec.params.mixer else "gemm"
        sources["other_linear"] = (f"{model.other_weights / 1e9:.2f}B weights outside q/k/v/o and MLP shapes "
                                   f"({', '.join(sorted({x.kind for x in model.spec.layers} - set(standard_kinds)))}"
                                   f" layers): timed as GEMMs from the hidden size, "
                                   + sources.get(table, "roofline").split(" (")[0])
    for op in ("gemm", "context_attention", "generation_attention", "moe", "allreduce", "moe_allreduce"):
        sources.setdefault(op, ROOFLINE)
    for op, absent in (("moe", not model.spec.moe_shape[0]), ("allreduce", tp == 1),
                       ("moe_allreduce", not (model.spec.moe_shape[0] and dp > 1 and group > 1))):
        if absent:  # a dense model has no MoE op; one GPU reduces nothing
            sources.pop(op, None)
    if tp > 1 and model.spec.tp_norm_allreduces:
        sources["allreduce"] += (f"; {model.spec.tp_norm_allreduces} more a step for norms spanning the TP group "
                                 "(q/k over all heads)")
    for op, eager_grid in (("allreduce", model.eager_allreduce), ("moe_allreduce", model.eager_moe_allreduce)):
        if op in sources and eager_grid is not None:
            sources[op] += f"; its eager-launch timings in steps above {captured} tokens (not captured)"
    if model.router_gemm is not None:
        sources["router"] = f"{tables['gemm'].source} gemm_dtype=bfloat16 (vLLM builds the MoE gate with quant_config=None)"
    sources["elementwise"] = ("roofline: norms, rotary and activations as HBM traffic "
                              f"({model.elementwise_bytes_per_token / 1e3:.0f} kB a token on one GPU)")
    sources.update(model.host_sources())
    for op, gpus in (("allreduce", tp), ("moe_allreduce", group)):
        if op in sources and gpus > NODE_GPUS:  # not measured there, and the roofline knows one link only
            sources[op] += (f"; {gpus} GPUs are more than one {NODE_GPUS}-GPU node: timed as if all were on "
                            f"one NVLink domain (an inter-node network is slower; not modeled)")
