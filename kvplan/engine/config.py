"""`EngineConfig`: the engine's knobs, named as vLLM names them, and their one set of rules.

A frozen dataclass validated by pydantic when it is built, so the three ways in share one check:
the scenario's `engine:` block (a field of `Scenario`: errors carry the field path), `kvplan serve`'s
flags and Python callers (`EngineConfig(block_size=0)` raises `KvplanError` naming the field).
Imports neither torch nor transformers.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator
from pydantic.dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.spec.dtypes import KV_DTYPE_CHOICES, MODEL_DTYPE_ALIASES
from kvplan.validation import FieldIssue, format_validation_error, short_repr

CPU_DEFAULT_KV_CACHE_MEMORY_BYTES = 256 * 2**20  # no device to measure on CPU: a fixed, documented budget
# The engine runs these KV dtypes; int4 and fp8_e5m2 are planned only.
ENGINE_KV_DTYPES = tuple(
    dict.fromkeys(d for d in (*KV_DTYPE_CHOICES, *MODEL_DTYPE_ALIASES) if d not in ("int4", "fp8_e5m2", "fp8_ds_mla"))
)
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*$")
_BYTE_UNITS = {None: 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_bytes(value: Any) -> Any:
    """`"32 MiB"` -> 33554432; other values pass through (the field's type then checks them)."""
    if isinstance(value, str):
        m = _BYTES_RE.match(value)
        if not m:
            raise FieldIssue((), f"must be a byte count such as 33554432 or '32 MiB', got {value!r}")
        return int(float(m.group(1)) * _BYTE_UNITS[m.group(2)])
    return value


Allocator = Literal["paged", "contiguous"]  # paged blocks, or one max_model_len slab per sequence


# strict: YAML `"5"` is not silently an int, and `true` is not 1
@dataclass(frozen=True, config=ConfigDict(strict=True, extra="forbid", allow_inf_nan=False))
class EngineConfig:
    """Engine settings.

    KV memory: `kv_cache_memory_bytes` when given; else on CUDA `gpu_memory_utilization` of the
    device minus what the model and a profiling forward took (as vLLM does); else on CPU
    `CPU_DEFAULT_KV_CACHE_MEMORY_BYTES`. `num_gpu_blocks_override` wins over both (vLLM's flag).
    """

    block_size: int = Field(default=16, gt=0)
    max_num_seqs: int = Field(default=256, gt=0)
    max_num_batched_tokens: int = Field(default=2048, gt=0)
    max_model_len: int | None = Field(default=None, gt=0)  # None: the model's max_position_embeddings
    kv_cache_dtype: str = "auto"  # auto = the model's dtype; fp8 (e4m3) or int8 quantize the pool
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    enable_prefix_caching: bool = False
    allocator: Allocator = "paged"
    swap_space_bytes: int = Field(default=0, ge=0)  # CPU pool for swap preemption; 0 = preempt by recompute
    # a CPU tier as vLLM's native offloading (--kv-offloading-size): full blocks copied there as
    # they are scheduled, loaded back on a GPU miss; 0 = none (needs enable_prefix_caching)
    kv_offloading_bytes: int = Field(default=0, ge=0)
    device: str = "cpu"
    dtype: str = "auto"  # model dtype: see compute_dtype()
    num_gpu_blocks_override: int | None = Field(default=None, gt=0)
    seed: int = 0  # sampling generator seed (requests may carry their own)
    # intra-op CPU threads; None: chosen at start-up from the free cores (engine/threads.py)
    num_threads: int | None = Field(default=None, gt=0)

    @field_validator("kv_cache_memory_bytes", "swap_space_bytes", "kv_offloading_bytes", mode="before")
    @classmethod
    def _bytes(cls, v: Any) -> Any:
        return parse_bytes(v)

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv_dtype(cls, v: str) -> str:
        if v.lower() in ("int4", "fp8_e5m2"):
            raise FieldIssue((), f"{v!r} is planned but not run by the engine; choices: {', '.join(ENGINE_KV_DTYPES)}")
        if v.lower() not in ENGINE_KV_DTYPES:
            raise FieldIssue((), f"{v!r} is not a KV dtype the engine runs; choices: {', '.join(ENGINE_KV_DTYPES)}")
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v != "auto" and v.lower().removeprefix("torch.") not in MODEL_DTYPE_ALIASES:
            raise FieldIssue((), f"{short_repr(v)} is not a model dtype; choices: auto, float32, float16, bfloat16")
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:\d+)?", v):
            raise FieldIssue((), f"{short_repr(v)} is not a device; choices: cpu, cuda, cuda:N")
        return v

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def compute_dtype(self) -> str:
        """The model dtype the engine runs (the one "auto" rule): float32 on CPU, bfloat16 on CUDA."""
        if self.dtype != "auto":
            return MODEL_DTYPE_ALIASES[self.dtype.lower().removeprefix("torch.")]
        return "bfloat16" if self.is_cuda else "float32"


_validating_init = EngineConfig.__init__


def _init(self: EngineConfig, *args: Any, **kwargs: Any) -> None:
    # Python callers and CLI flags get the same one-line KvplanError as a scenario file
    try:
        _validating_init(self, *args, **kwargs)
    except ValidationError as exc:
        raise KvplanError(format_validation_error("EngineConfig", exc, EngineConfig)) from None


EngineConfig.__init__ = _init  # type: ignore[method-assign]


def engine_config_from(data: dict[str, Any]) -> EngineConfig:
    """An `EngineConfig` from a mapping (a scenario's `engine:` block); raises pydantic's
    `ValidationError`, whose field paths the scenario prefixes with `engine.`."""
    config = EngineConfig.__new__(EngineConfig)
    _validating_init(config, **data)
    return config
