"""Which measured table times a model's weights: vLLM's kernel for its quantization, as vLLM names it.

A checkpoint may keep some layers out of its scheme (ModelOpt `exclude_modules`, compressed-tensors
`ignore`: NVIDIA's NVFP4 MiniMax-M2.5 and Kimi-K2.5 keep every self_attn in bf16). vLLM then builds
those layers unquantized, so their GEMMs run bf16 kernels: `attention_gemm_dtype` says so per group.
"""
from __future__ import annotations

from kvplan.spec.model import ModelSpec, text_config

INT4_WEIGHT_ONLY = ("w4a16", "gptq", "awq", "gptq_marlin", "awq_marlin")


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
        block = (text_config(spec.config).get("quantization_config") or {}).get("weight_block_size") if spec.config else None
        return ("fp8_block", "fp8_block") if block else ("fp8", "fp8")
    if method == "nvfp4":
        return "nvfp4", "nvfp4"
    if method == "mxfp4":
        return "bfloat16", "w4a16_mxfp4"
    if method in INT4_WEIGHT_ONLY:
        return ("bfloat16" if _kept(spec, "attention") else None), "int4_wo"
    return None, None


def _kept(spec: ModelSpec, group: str) -> bool:
    """The checkpoint leaves every weight of `group` in the model dtype (0% converted)."""
    return {g: pct for g, _, pct in spec.quant.groups}.get(group) == 0


def attention_gemm_dtype(spec: ModelSpec, quantization: str | None, dense: str | None) -> str | None:
    """The table of the attention projections (q/k/v/o, MLA's): bf16 where a checkpoint keeps its
    attention layers unquantized, else the dense GEMMs' (a runtime --quantization converts them all)."""
    _, runtime = _method(spec, quantization)
    return "bfloat16" if not runtime and _kept(spec, "attention") else dense
