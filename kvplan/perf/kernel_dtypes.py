"""Which measured table times a model's weights: vLLM's kernel for its quantization, as vLLM names it.

vLLM builds some linear layers unquantized whatever the scheme: the LM head (an embedding-like
layer no quantization config converts unless it says so) and the MoE gate (built with
quant_config=None). A checkpoint may also keep layers out of its scheme (ModelOpt
`exclude_modules`, compressed-tensors `ignore`: NVIDIA's NVFP4 MiniMax-M2.5 and Kimi-K2.5 keep every
self_attn in bf16); vLLM then builds those unquantized too. Their GEMMs run bf16 kernels:
`unquantized_tables` names them.
"""
from __future__ import annotations

from kvplan.spec.model import ModelSpec, text_config

INT4_WEIGHT_ONLY = ("w4a16", "gptq", "awq", "gptq_marlin", "awq_marlin")
ALWAYS_UNQUANTIZED = ("head", "router")  # the LM head and the MoE gate
GROUP_TABLES = {"attention": "attention", "mlp_dense": "mlp"}  # ParamCount group -> the GEMM calls it holds


def _method(spec: ModelSpec, quantization: str | None) -> tuple[str, bool]:
    """(quantization method as vLLM names it, whether it is the runtime --quantization)."""
    runtime = bool(quantization and quantization != "none" and spec.quant.method == "none")
    return (quantization if runtime else spec.quant.method).lower().replace("-", "_"), runtime  # type: ignore[union-attr]


def kernel_dtypes(spec: ModelSpec, quantization: str | None) -> tuple[str | None, str | None]:
    """(dense GEMM table, fused-MoE table) vLLM runs a model's weights on, by its quantization as
    vLLM names it; None: not measured, roofline. fp8 (runtime, a checkpoint's, compressed-tensors
    w8a8 fp8, ModelOpt FP8): fp8, or fp8_block for 128x128-block checkpoints; ModelOpt NVFP4: nvfp4;
    MXFP4 (gpt-oss: experts only): bf16 GEMMs, w4a16_mxfp4 experts; int4 weight-only (GPTQ, AWQ,
    compressed-tensors w4a16, their Marlin kernels): int4_wo experts, and bf16 GEMMs where the
    checkpoint keeps attention in 16 bits (no int4 dense GEMM is measured)."""
    method, _ = _method(spec, quantization)
    if method == "none":
        return "bfloat16", "bfloat16"
    if method == "fp8":
        block = (
            (text_config(spec.config).get("quantization_config") or {}).get("weight_block_size")
            if spec.config
            else None
        )
        return ("fp8_block", "fp8_block") if block else ("fp8", "fp8")
    if method == "nvfp4":
        return "nvfp4", "nvfp4"
    if method == "mxfp4":
        return "bfloat16", "w4a16_mxfp4"
    if method in INT4_WEIGHT_ONLY:
        return ("bfloat16" if _kept_pct(spec, "attention") == 100 else None), "int4_wo"
    return None, None


def _kept_pct(spec: ModelSpec, group: str) -> int:
    """Percent of `group`'s weights the checkpoint leaves in the model dtype (0: the scheme converts
    all of it, or the checkpoint says nothing per group)."""
    return 100 - {g: pct for g, _, pct in spec.quant.groups}.get(group, 100)


def unquantized_tables(spec: ModelSpec, quantization: str | None) -> tuple[str, ...]:
    """The GEMM calls (`KernelStepModel._gemm_calls` labels) timed from the bf16 table: the LM head
    and MoE gate always, and a group the checkpoint keeps mostly (over half) unquantized; a runtime
    --quantization converts every linear layer."""
    _, runtime = _method(spec, quantization)
    kept = [] if runtime else [table for group, table in GROUP_TABLES.items() if _kept_pct(spec, group) > 50]
    return ALWAYS_UNQUANTIZED + tuple(kept)


def partly_kept_note(spec: ModelSpec, quantization: str | None) -> str | None:
    """What is approximated when a checkpoint keeps only part of a group unquantized (ModelOpt
    excluding some layers' self_attn): the group is timed with its majority's kernel."""
    _, runtime = _method(spec, quantization)
    partial = [(g, _kept_pct(spec, g)) for g in GROUP_TABLES if 0 < _kept_pct(spec, g) < 100]
    if runtime or not partial:
        return None
    return ("the checkpoint keeps " + ", ".join(f"{kept}% of its {g} weights" for g, kept in partial)
            + " unquantized: each group timed with its majority's kernel (not per layer)")
