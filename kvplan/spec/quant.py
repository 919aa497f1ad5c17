"""`WeightQuant`: bytes per weight for quantized checkpoints and runtime quantization.

Only decoder linear layers are converted; embeddings, norms and (unless stated) the LM head
stay in the model dtype. Group-wise int4 formats add a 16-bit scale per group (and a packed
4-bit zero point for GPTQ/AWQ); MXFP4 adds an 8-bit shared exponent per 32 values.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.spec.params import ParamCount

QUANTIZATION_CHOICES = ("none", "fp8", "int8", "w8a8", "w4a16", "gptq", "awq", "mxfp4", "bitsandbytes")


LINEAR_GROUPS = ("attention", "mixer", "mlp_dense", "experts")  # ParamCount fields a scheme may convert


@dataclass(frozen=True)
class WeightQuant:
    method: str = "none"
    linear_bits_x100: int = 0  # hundredths of a bit per converted weight, scales included (0: model dtype)
    experts_only: bool = False  # MXFP4 in gpt-oss converts the MoE experts only
    # per ParamCount group (LINEAR_GROUPS) where a checkpoint says more: (group, bits x100 of its
    # converted part, hundredths of the group converted); the rest of the group stays in the model dtype
    groups: tuple[tuple[str, int, int], ...] = ()
    kv_cache_dtype: str | None = None  # the checkpoint's KV cache quantization ("fp8"): what vLLM's `auto` uses
    notes: tuple[str, ...] = ()  # what was assumed in reading the scheme (shown as warnings)

    def weights_bytes(self, params: ParamCount, dtype_bytes: int) -> int:
        if self.method == "none":
            return params.total * dtype_bytes
        if self.groups:
            total_x800 = (params.total - params.linear) * dtype_bytes * 800
            for group, bits, pct in self.groups:
                n = getattr(params, group)
                converted = n * pct // 100
                total_x800 += converted * bits + (n - converted) * dtype_bytes * 800
            untouched = [g for g in LINEAR_GROUPS if g not in {g2 for g2, _, _ in self.groups}]
            total_x800 += sum(getattr(params, g) for g in untouched) * dtype_bytes * 800
            return (total_x800 + 799) // 800
        converted = params.experts if self.experts_only else params.linear
        kept = params.total - converted
        return kept * dtype_bytes + (converted * self.linear_bits_x100 + 799) // 800


def _int4(group_size: int, zero_point: bool) -> int:
    """Hundredths of a bit per weight: 4 bits + fp16 scale per group (+ 4-bit zero point)."""
    group_size = group_size if group_size and group_size > 0 else 128
    return 400 + round((16 + (4 if zero_point else 0)) * 100 / group_size)


def make_quant(method: str, *, group_size: int = 128) -> WeightQuant:
    m = method.lower().replace("-", "_")
    if m in ("none", ""):
        return WeightQuant()
    if m in ("fp8", "fbgemm_fp8", "modelopt", "w8a8", "int8", "w8a8_int8", "w8a8_fp8", "experts_int8"):
        return WeightQuant("fp8" if "fp8" in m or m == "modelopt" else "int8", 800)
    if m in ("w4a16", "compressed_tensors_w4a16"):
        return WeightQuant("w4a16", _int4(group_size, False))
    if m in ("gptq", "gptq_marlin", "awq", "awq_marlin", "marlin"):
        return WeightQuant(m.split("_")[0], _int4(group_size, True))
    if m == "mxfp4":
        return WeightQuant("mxfp4", 425, experts_only=True)
    if m in ("bitsandbytes", "bnb"):
        return WeightQuant("bitsandbytes", 450)  # nf4 + blockwise absmax (64) with double quantization
    raise KvplanError(f"unknown quantization {method!r}; choices: {', '.join(QUANTIZATION_CHOICES)}")


# `vllm serve --quantization` values among QUANTIZATION_CHOICES; int8 / w8a8 / w4a16 checkpoints are
# compressed-tensors ones, whose method vLLM reads from the checkpoint (no flag to pass).
VLLM_QUANTIZATION_FLAGS = ("fp8", "gptq", "awq", "mxfp4", "bitsandbytes")
