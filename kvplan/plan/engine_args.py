"""`EngineArgs`: the `vllm serve` arguments that decide KV capacity and step time, and their one
set of checks.

Every way in builds the same record: `kvplan estimate/predict/plan` through `from_flags`, the
planner's fixes and searches through `dataclasses.replace`. Each value is checked once, when the
record is built (`__post_init__`); what can only be checked against a model (KV dtype, parallel
sizes that divide heads and layers) is `validate(spec)`, called by `plan_capacity`.
"""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.plan import overheads as oh
from kvplan.plan.groups import MAMBA_CACHE_MODES
from kvplan.plan.kv import validate_parallel
from kvplan.spec.config_section import section
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec
from kvplan.spec.quant import QUANTIZATION_CHOICES
from kvplan.validation import short_repr

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
# physical upper bounds, so no number reaches float arithmetic it would overflow
MAX_PARALLEL = 1024
MAX_BLOCK_SIZE = 2**16
MAX_COUNT = 2**31  # tokens and sequences: vLLM's own int32 limits
MAX_KV_CACHE_BYTES = 2**50
# what vLLM applies to an unquantized checkpoint at load time; gptq, awq, w8a8, w4a16, mxfp4 need
# a checkpoint quantized that way (vLLM refuses them otherwise: no quantization config to read)
RUNTIME_QUANTIZATIONS = ("fp8", "bitsandbytes")
# `vllm serve --quantization` names -> the checkpoint `quant_method` each reads (Marlin kernels run
# GPTQ/AWQ checkpoints; ModelOpt covers FP8 and NVFP4; fbgemm_fp8 and fp8 quantize at load too)
VLLM_QUANTIZATION_METHODS = {
    "fp8": "fp8", "fbgemm_fp8": "fbgemm_fp8", "awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq",
    "compressed_tensors": "compressed-tensors", "modelopt": "modelopt", "modelopt_fp4": "modelopt", "nvfp4": "modelopt",
    "mxfp4": "mxfp4", "bitsandbytes": "bitsandbytes",
}


@dataclass(frozen=True)
class EngineArgs:
    """The vLLM engine arguments that decide KV capacity (names as in `vllm serve`)."""

    gpu: GpuSpec | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    # --data-parallel-size: engine replicas, each with its own scheduler and KV pool (TP inside);
    # a MoE model's expert layers are sharded over all data_parallel_size x tensor_parallel_size
    # GPUs: tensor-parallel by default, expert-parallel with --enable-expert-parallel (vLLM's rules)
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_memory_bytes: int | None = None
    enforce_eager: bool = False
    vllm_version: str = oh.DEFAULT_VLLM_VERSION
    async_scheduling: bool | None = None  # --(no-)async-scheduling; None: the version's default (on from 0.14)
    mamba_cache_mode: str | None = None  # hybrid state models: "none" or "align"; None: vLLM's default
    limit_mm_per_prompt: tuple[tuple[str, int], ...] | None = None  # --limit-mm-per-prompt, (modality, count) pairs
    skip_mm_profiling: bool = False  # --skip-mm-profiling: the tower's dummy batch is not run in the profile
    mm_max_pixels: int | None = None  # --mm-processor-kwargs '{"max_pixels": N}' (Qwen-VL image processors)

    def __post_init__(self) -> None:
        """A bad value is a one-line KvplanError naming the flag (the CLI exits 2)."""
        if not 0 < self.gpu_memory_utilization <= 1:
            raise KvplanError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        for flag, value, most in (("--tensor-parallel-size/--tp", self.tensor_parallel_size, MAX_PARALLEL),
                                  ("--pipeline-parallel-size/--pp", self.pipeline_parallel_size, MAX_PARALLEL),
                                  ("--data-parallel-size/--dp", self.data_parallel_size, MAX_PARALLEL),
                                  ("--block-size", self.block_size, MAX_BLOCK_SIZE),
                                  ("--max-model-len", self.max_model_len, MAX_COUNT),
                                  ("--max-num-seqs", self.max_num_seqs, MAX_COUNT),
                                  ("--max-num-batched-tokens", self.max_num_batched_tokens, MAX_COUNT)):
            if value is not None and value <= 0:
                raise KvplanError(f"{flag} must be positive, got {value}")
            if value is not None and value > most:
                raise KvplanError(f"{flag} must be at most {most:,}, got {short_repr(value)}")
        if self.kv_cache_memory_bytes is not None and not 0 <= self.kv_cache_memory_bytes <= MAX_KV_CACHE_BYTES:
            raise KvplanError(f"--kv-cache-memory-bytes must be in 0..{MAX_KV_CACHE_BYTES:,} (1 PiB), "
                              f"got {short_repr(self.kv_cache_memory_bytes)}")
        known = {q.replace("-", "_") for q in QUANTIZATION_CHOICES} | set(VLLM_QUANTIZATION_METHODS)
        if self.quantization and self.quantization.lower().replace("-", "_") not in known:
            names = sorted({*QUANTIZATION_CHOICES, *(n.replace("_", "-") if n == "compressed_tensors" else n
                                                     for n in VLLM_QUANTIZATION_METHODS)})
            raise KvplanError(f"unknown --quantization {self.quantization!r}; choices: {', '.join(names)}")
        oh.parse_vllm_version(self.vllm_version)
        if self.mamba_cache_mode not in (None, *MAMBA_CACHE_MODES):
            raise KvplanError(f"--mamba-cache-mode {self.mamba_cache_mode!r} is not modelled; "
                              f"choices: {', '.join(MAMBA_CACHE_MODES)}")

    @classmethod
    def from_flags(cls, *, gpu: GpuSpec | None, gpu_memory_utilization: float | None = None,
                   kv_cache_memory_bytes: int | None = None, vllm_version: str | None = None,
                   tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1, data_parallel_size: int = 1,
                   enable_expert_parallel: bool = False, dtype: str = "auto",
                   quantization: str | None = None, kv_cache_dtype: str = "auto", block_size: int = 16,
                   max_model_len: int | None = None, max_num_seqs: int | None = None,
                   max_num_batched_tokens: int | None = None, enforce_eager: bool = False,
                   async_scheduling: bool | None = None) -> EngineArgs:
        """The record from command-line flags (None: not given); the one contradiction between two
        flags is refused here, every single value in `__post_init__`."""
        if kv_cache_memory_bytes is not None and gpu_memory_utilization is not None:
            raise KvplanError("give either --kv-cache-memory-bytes or --gpu-memory-utilization, not both "
                              "(vLLM ignores the utilization when the KV bytes are given)")
        util = DEFAULT_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization
        return cls(gpu=gpu, gpu_memory_utilization=util, tensor_parallel_size=tensor_parallel_size,
                   pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
                   enable_expert_parallel=enable_expert_parallel, dtype=dtype, quantization=quantization,
                   kv_cache_dtype=kv_cache_dtype, block_size=block_size, max_model_len=max_model_len,
                   max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                   kv_cache_memory_bytes=kv_cache_memory_bytes, enforce_eager=enforce_eager,
                   vllm_version=vllm_version or oh.DEFAULT_VLLM_VERSION, async_scheduling=async_scheduling)

    @property
    def schedules_async(self) -> bool:
        """vLLM schedules step N+1 while step N runs: as asked, else the version's default."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        return oh.schedules_async_by_default(self.vllm_version)

    @property
    def moe_group_size(self) -> int:
        """GPUs a MoE layer's experts are spread over: all of them (DP x TP), as vLLM shards them."""
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def total_gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def plans_capacity(self) -> bool:
        """A capacity plan needs a GPU, or only the KV bytes (vLLM then ignores the GPU's size)."""
        return self.gpu is not None or self.kv_cache_memory_bytes is not None

    def validate(self, spec: ModelSpec) -> None:
        """What only a model can tell: a plan at all, the KV dtype, parallel sizes that divide it."""
        if not self.plans_capacity:
            raise KvplanError("a capacity plan needs --gpu or --gpu-memory-gib (or --kv-cache-memory-bytes)")
        method = (self.quantization or "none").lower().replace("-", "_")
        if method not in ("none", *RUNTIME_QUANTIZATIONS, "fbgemm_fp8") and spec.quant.method == "none":
            raise KvplanError(
                f"--quantization {self.quantization} needs a checkpoint quantized with it; {spec.name} is "
                f"not (vLLM refuses it); at load time vLLM applies only: {', '.join(RUNTIME_QUANTIZATIONS)}"
            )
        qc = spec.config.get("quantization_config") or section(spec.config, "text_config").get("quantization_config")
        stored = str(qc.get("quant_method") or "").lower().replace("_", "-") if isinstance(qc, dict) else ""
        wanted = VLLM_QUANTIZATION_METHODS.get(method, "").replace("_", "-")
        if stored and wanted and spec.quant.method != "none" and wanted != stored and not (
                wanted in ("fp8", "fbgemm-fp8") and stored in ("fp8", "fbgemm-fp8")):
            raise KvplanError(
                f"--quantization {self.quantization}: {spec.name}'s checkpoint is {stored}-quantized, and vLLM "
                f"refuses a method that does not match it; leave --quantization out (vLLM reads it from the "
                "checkpoint) or name its method"
            )
        spec.kv_dtype(self.kv_cache_dtype, spec.served_dtype(self.dtype))
        validate_parallel(spec, self.tensor_parallel_size, self.pipeline_parallel_size)
