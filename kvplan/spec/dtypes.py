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
    # DeepSeek-V3.2's sparse-MLA cache (FlashMLA layout): a fixed 656 bytes per token per layer,
    # whatever the element count (`FP8_DS_MLA_BYTES_PER_TOKEN`); only sparse MLA layers take it.
    "fp8_ds_mla": KvDtype("fp8_ds_mla", 8, 0, "uint8"),
}
# vllm/v1/attention/backends/mla/flashmla_sparse.py get_kv_cache_shape and MLAAttentionSpec.page_size_bytes:
# 512 fp8 latent values + 4 float32 scales (one per 128) + 64 bf16 RoPE values = 512 + 16 + 128.
FP8_DS_MLA_BYTES_PER_TOKEN = 656
KV_DTYPE_CHOICES = ("auto", *KV_DTYPES)
# What `vllm serve --kv-cache-dtype` accepts (newer versions add bfloat16 and hardware-specific
# fp8 variants): int8 and int4 are planned by kvplan but have no vLLM flag.
VLLM_KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")


def normalize_model_dtype(name: str) -> str:
    """'bf16' -> 'bfloat16'; raises a KvplanError listing the choices."""
    key = str(name).lower().removeprefix("torch.")
    if key not in MODEL_DTYPE_ALIASES:
        raise KvplanError(f"unknown dtype {name!r}; choices: auto, {', '.join(sorted(MODEL_DTYPE_ALIASES))}")
    return MODEL_DTYPE_ALIASES[key]


# architectures whose `auto` KV cache vLLM sets to fp8_ds_mla (vllm/model_executor/models/config.py
# DeepseekV32ForCausalLM); other sparse-MLA models (GLM-5's GlmMoeDsaForCausalLM) cache the model dtype
# under auto and take fp8_ds_mla only when fp8 is asked for
SPARSE_MLA_FP8_BY_DEFAULT = frozenset({"DeepseekV32ForCausalLM"})


def resolve_kv_dtype(kv_cache_dtype: str, model_dtype: str, *, sparse_mla: bool = False,
                     checkpoint: str | None = None, auto_fp8_ds_mla: bool = True) -> KvDtype:
    """`auto` means the model's activation dtype, as in vLLM, unless the checkpoint declares a
    quantized KV cache (`checkpoint`: ModelOpt `kv_cache_quant_algo: FP8`), which `auto` then uses.
    A DeepSeek-V3.2 sparse-MLA model (`sparse_mla`) gets vLLM's fp8_ds_mla cache for auto and every
    fp8 name, and a 16-bit cache only when asked for bfloat16
    (vllm/model_executor/models/config.py DeepseekV32ForCausalLM)."""
    key = str(kv_cache_dtype).lower()
    if key == "auto" and checkpoint:
        key = checkpoint
    if sparse_mla and ((key == "auto" and auto_fp8_ds_mla) or key.startswith("fp8")):
        return KV_DTYPES["fp8_ds_mla"]
    if key == "fp8_ds_mla" and not sparse_mla:
        raise KvplanError("--kv-cache-dtype fp8_ds_mla is the cache of DeepSeek-V3.2's sparse MLA only; "
                          f"choices here: {', '.join(c for c in KV_DTYPE_CHOICES if c != 'fp8_ds_mla')}")
    if key == "auto":
        return KV_DTYPES[normalize_model_dtype(model_dtype)]
    if key in MODEL_DTYPE_ALIASES:
        return KV_DTYPES[MODEL_DTYPE_ALIASES[key]]
    if key not in KV_DTYPES:
        raise KvplanError(f"unknown kv cache dtype {kv_cache_dtype!r}; choices: {', '.join(KV_DTYPE_CHOICES)}")
    return KV_DTYPES[key]


def vllm_kv_cache_dtype(kv: KvDtype, model_dtype: str) -> str | None:
    """The `vllm serve --kv-cache-dtype` value that gives `kv`, or None when vLLM has none.

    vLLM's "auto" follows the served model dtype, so a 16/32-bit KV cache in that dtype is "auto";
    the fp8 variants keep their names; int8/int4 (and a 16-bit KV cache in another dtype than the
    model's) cannot be asked of vLLM.
    """
    if kv.name in VLLM_KV_CACHE_DTYPES:
        return kv.name
    if kv.name == normalize_model_dtype(model_dtype):
        return "auto"
    return None


def no_vllm_kv_flag_reason(kv: KvDtype, model_dtype: str) -> str:
    """Why `kv` has no `--kv-cache-dtype` in vLLM (one phrase)."""
    if kv.bits > 8:
        return (f"vLLM's KV cache follows the model dtype ({normalize_model_dtype(model_dtype)}): "
                f"{kv.name} KV needs --dtype {kv.name}")
    return (f"{kv.name} KV is planned only: vLLM has no {kv.name} --kv-cache-dtype "
            f"(its choices: {', '.join(VLLM_KV_CACHE_DTYPES)})")
