"""Element types for weights and the KV cache.

KV bytes are kept exact (integers) by counting bits: int4 stores two elements per byte.
Quantized KV layouts that store a scale per (token, head) add `scale_bytes_per_token_head`
for K and again for V.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import KvplanError


@dataclass(frozen=True)
class KvDtype:
    name: str
    bits: int  # per element
    scale_bytes_per_token_head: int  # per K or V vector of one head (0: per-tensor scale or none)
    torch_name: str  # storage dtype in the engine

    def bytes_for(self, elements: int) -> int:
        """Bytes for `elements` values (exact: callers pass whole heads, so bits*n is a multiple of 8)."""
        return (elements * self.bits + 7) // 8


# Weight / activation dtypes (bytes per element).
MODEL_DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}
MODEL_DTYPE_ALIASES = {
    "fp32": "float32", "float": "float32", "float32": "float32",
    "fp16": "float16", "half": "float16", "float16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
}

# KV cache dtypes. fp8 keeps one per-tensor scale per layer (vLLM's k_scale/v_scale), which is
# negligible and not stored per block. int8/int4 keep a float16 scale per token and head.
KV_DTYPES: dict[str, KvDtype] = {
    "float32": KvDtype("float32", 32, 0, "float32"),
    "float16": KvDtype("float16", 16, 0, "float16"),
    "bfloat16": KvDtype("bfloat16", 16, 0, "bfloat16"),
    "fp8": KvDtype("fp8", 8, 0, "float8_e4m3fn"),
    "fp8_e4m3": KvDtype("fp8_e4m3", 8, 0, "float8_e4m3fn"),
    "fp8_e5m2": KvDtype("fp8_e5m2", 8, 0, "float8_e5m2"),
    "int8": KvDtype("int8", 8, 2, "int8"),
    "int4": KvDtype("int4", 4, 2, "uint8"),
}
KV_DTYPE_CHOICES = ("auto", *KV_DTYPES)


def normalize_model_dtype(name: str) -> str:
    """'bf16' -> 'bfloat16'; raises a KvplanError listing the choices."""
    key = str(name).lower().removeprefix("torch.")
    if key not in MODEL_DTYPE_ALIASES:
        raise KvplanError(f"unknown dtype {name!r}; choices: auto, {', '.join(sorted(MODEL_DTYPE_ALIASES))}")
    return MODEL_DTYPE_ALIASES[key]


def resolve_kv_dtype(kv_cache_dtype: str, model_dtype: str) -> KvDtype:
    """`auto` means the model's activation dtype, as in vLLM."""
    key = str(kv_cache_dtype).lower()
    if key == "auto":
        return KV_DTYPES[normalize_model_dtype(model_dtype)]
    if key in MODEL_DTYPE_ALIASES:
        return KV_DTYPES[MODEL_DTYPE_ALIASES[key]]
    if key not in KV_DTYPES:
        raise KvplanError(f"unknown kv cache dtype {kv_cache_dtype!r}; choices: {', '.join(KV_DTYPE_CHOICES)}")
    return KV_DTYPES[key]
