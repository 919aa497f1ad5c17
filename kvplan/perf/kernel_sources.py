"""What each op of a `KernelStepModel` was timed from, as `predict` prints it: the measured table
(system, vLLM version) or the roofline, and what the model assumed beyond the table (eager launches,
norms spanning the TP group, the MoE gate in bf16, collectives wider than one node, the host)."""
from __future__ import annotations

from typing import Any

from kvplan.plan.overheads import parse_vllm_version

NODE_GPUS = 8  # GPUs of one HGX/DGX board (NVLink domain); the measured collectives go up to it
ROOFLINE = "roofline (datasheet, kvplan's global coefficients)"


def annotate_sources(model: Any, tables: dict, group: int, standard_kinds: tuple[str, ...],
                     vllm_version: str | None = None) -> None:
    """Complete a `KernelStepModel`'s `sources` (the grids' builders wrote the tables they used);
    `group`: the GPUs a MoE layer spans, `standard_kinds`: the layer kinds timed by shape,
    `vllm_version`: the build asked about (a note when the tables come from a later one)."""
    sources, tp, dp, captured = model.sources, model.tp, model.dp, model.captured_tokens
    used = [t for _, t, *_ in model._gemm_calls(1, 1)]
    plain = [t for t in model.plain_tables if t in used] if model.plain_gemm is not None else []
    if plain:
        why = {"head": "LM head", "router": "MoE gate (quant_config=None)",
               "attention": "attention (kept unquantized by the checkpoint)",
               "mlp": "dense MLPs and shared experts (kept unquantized by the checkpoint)"}
        sources["unquantized_gemm"] = (f"{tables['gemm'].source} gemm_dtype=bfloat16 for the layers vLLM builds "
                                       f"unquantized: {', '.join(why[t] for t in plain)}")
    if model.other_weights:  # MLA's projections are attention weights unless the model has mixers
        plain_other = ("dense" if model.spec.params.mixer else "attention") in plain
        table = (
            f"{tables['gemm'].source} gemm_dtype=bfloat16"
            if plain_other
            else sources.get("gemm", "roofline").split(" (")[0]
        )
        sources["other_linear"] = (f"{model.other_weights / 1e9:.2f}B weights outside q/k/v/o and MLP shapes "
                                   f"({', '.join(sorted({x.kind for x in model.spec.layers} - set(standard_kinds)))}"
                                   f" layers): timed as GEMMs from the hidden size, "
                                   + table)
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
    sources["elementwise"] = ("roofline: norms, rotary and activations as HBM traffic "
                              f"({model.elementwise_bytes_per_token / 1e3:.0f} kB a token on one GPU)")
    sources.update(model.host_sources())
    for op, gpus in (("allreduce", tp), ("moe_allreduce", group)):
        if op in sources and gpus > NODE_GPUS:  # not measured there, and the roofline knows one link only
            sources[op] += (f"; {gpus} GPUs are more than one {NODE_GPUS}-GPU node: timed as if all were on "
                            f"one NVLink domain (an inter-node network is slower; not modeled)")
    builds: set[str] = {tables[op].vllm_version for op, text in sources.items()
            if op in tables and tables[op].vllm_version and not text.startswith(ROOFLINE)}
    if vllm_version and (note := older_build_note(builds, vllm_version, bool(model.spec.moe_shape[0]))):
        sources["kernel_build"] = note


def older_build_note(built: set[str], vllm_version: str, moe: bool = False) -> str | None:
    """A note when the asked-for vLLM predates a build whose kernels the tables in use measured
    (`built`): vLLM changes which kernel runs an op between releases (MoE backends most), so the
    table may time a kernel that build did not run. None when they are that build's or older."""
    later = sorted(
        (v for v in built if parse_vllm_version(v) > parse_vllm_version(vllm_version)), key=parse_vllm_version
    )
    if not later:
        return None
    return (f"the measured tables are vLLM {', '.join(later)}'s kernels; vLLM {vllm_version} is older and may run "
            f"other kernels for some ops{' (its MoE backend above all)' if moe else ''}, so its times are less certain")
