"""`EngineConfig`: the engine's knobs, named as vLLM names them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvplan.errors import KvplanError
from kvplan.spec.dtypes import KV_DTYPE_CHOICES, MODEL_DTYPE_ALIASES

CPU_DEFAULT_KV_CACHE_MEMORY_BYTES = 256 * 2**20  # no device to measure on CPU: a fixed, documented budget


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings. Sizes are validated here; a bad value raises `KvplanError` naming it.

    KV memory: `kv_cache_memory_bytes` when given; else on CUDA `gpu_memory_utilization` of the
    device minus what the model and a profiling forward took (as vLLM does); else on CPU
    `CPU_DEFAULT_KV_CACHE_MEMORY_BYTES`. `num_gpu_blocks_override` wins over both (vLLM's flag).
    """

    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    kv_cache_dtype: str = "auto"  # auto = the model's dtype; fp8 (e4m3) or int8 quantize the pool
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = False
    allocator: Literal["paged", "contiguous"] = "paged"
    swap_space_bytes: int = 0  # CPU pool for swap preemption; 0 = preempt by recompute
    device: str = "cpu"
    dtype: str = "auto"  # model dtype for from_profile/from_pretrained: auto = float32 on CPU, bfloat16 on CUDA
    num_gpu_blocks_override: int | None = None
    seed: int = 0  # sampling generator seed (requests may carry their own)

    def __post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise KvplanError(f"EngineConfig.{name} must be a positive integer, got {value!r}")
        for name in ("max_model_len", "kv_cache_memory_bytes", "num_gpu_blocks_override"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise KvplanError(f"EngineConfig.{name} must be a positive integer or None, got {value!r}")
        if isinstance(self.swap_space_bytes, bool) or not isinstance(self.swap_space_bytes, int) or self.swap_space_bytes < 0:
            raise KvplanError(f"EngineConfig.swap_space_bytes must be an integer >= 0, got {self.swap_space_bytes!r}")
        if not 0.0 < float(self.gpu_memory_utilization) <= 1.0:
            raise KvplanError(f"EngineConfig.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        if self.allocator not in ("paged", "contiguous"):
            raise KvplanError(f"EngineConfig.allocator must be 'paged' or 'contiguous', got {self.allocator!r}")
        if str(self.kv_cache_dtype).lower() not in KV_DTYPE_CHOICES and str(self.kv_cache_dtype).lower() not in MODEL_DTYPE_ALIASES:
            raise KvplanError(f"EngineConfig.kv_cache_dtype {self.kv_cache_dtype!r} is unknown; choices: {', '.join(KV_DTYPE_CHOICES)}")
        if str(self.kv_cache_dtype).lower() in ("int4", "fp8_e5m2"):
            raise KvplanError(f"EngineConfig.kv_cache_dtype {self.kv_cache_dtype!r} is planned but not run by the engine; "
                              "use auto, float32, float16, bfloat16, fp8 or int8")
        if self.dtype != "auto" and str(self.dtype).lower().removeprefix("torch.") not in MODEL_DTYPE_ALIASES:
            raise KvplanError(f"EngineConfig.dtype {self.dtype!r} is unknown; choices: auto, float32, float16, bfloat16")
        if not (self.device == "cpu" or str(self.device).startswith("cuda")):
            raise KvplanError(f"EngineConfig.device must be 'cpu' or 'cuda[:N]', got {self.device!r}")

    @property
    def is_cuda(self) -> bool:
        return str(self.device).startswith("cuda")
