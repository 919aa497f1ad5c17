"""The vLLM memory budget and KV-cache layout: what `vllm serve` prints at start-up.

`plan_capacity(spec, args)` follows `../shared/reference/vllm-capacity.md`:

    requested = total x gpu_memory_utilization              (or --kv-cache-memory-bytes)
    available = requested - weights - peak activation - non-torch [- CUDA graphs, v0.21+]
    num_blocks = floor(available / (page_bytes x group_size)), min over pipeline stages
    tokens, max concurrency: the two log lines, per version (section 6)

and reproduces vLLM's start-up errors, including the binary-searched estimated maximum model
length (section 7). Overhead models live in `kvplan.plan.overheads`. Pure Python: `kvplan
estimate` imports this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil

from kvplan.errors import KvplanError
from kvplan.plan import overheads as oh
from kvplan.plan.kv import bytes_per_block, pp_layer_range, validate_parallel
from kvplan.spec.dtypes import resolve_kv_dtype
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec
from kvplan.spec.quant import QUANTIZATION_CHOICES
from kvplan.units import GIB

DOCS_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
HYBRID_GROUP_RATIO = 1.5  # group_size = max layer count when max < 1.5 x min (doc section 5)


@dataclass(frozen=True)
class EngineArgs:
    """The vLLM engine arguments that decide KV capacity (names as in `vllm serve`)."""

    gpu: GpuSpec | None = None
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
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

    def validate(self, spec: ModelSpec) -> None:
        """Raise a one-line KvplanError for a bad value (the CLI exits 2)."""
        if not 0 < self.gpu_memory_utilization <= 1:
            raise KvplanError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        for flag, value in (("--tensor-parallel-size/--tp", self.tensor_parallel_size),
                            ("--pipeline-parallel-size/--pp", self.pipeline_parallel_size),
                            ("--block-size", self.block_size), ("--max-model-len", self.max_model_len),
                            ("--max-num-seqs", self.max_num_seqs),
                            ("--max-num-batched-tokens", self.max_num_batched_tokens)):
            if value is not None and value <= 0:
                raise KvplanError(f"{flag} must be positive, got {value}")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 0:
            raise KvplanError(f"--kv-cache-memory-bytes must be >= 0, got {self.kv_cache_memory_bytes}")
        if self.gpu is None and self.kv_cache_memory_bytes is None:
            raise KvplanError("a capacity plan needs --gpu or --gpu-memory-gib (or --kv-cache-memory-bytes)")
        if self.quantization and self.quantization.lower().replace("-", "_") not in {q.replace("-", "_") for q in QUANTIZATION_CHOICES} | {"fp8"}:
            raise KvplanError(f"unknown --quantization {self.quantization!r}; choices: {', '.join(QUANTIZATION_CHOICES)}")
        oh.parse_vllm_version(self.vllm_version)
        resolve_kv_dtype(self.kv_cache_dtype, oh.model_dtype(spec, self.dtype))
        validate_parallel(spec, self.tensor_parallel_size, self.pipeline_parallel_size)


@dataclass(frozen=True)
class KvGroup:
    """One vLLM KV-cache group type: `count` groups of this attention type share the block pool."""

    kind: str  # full, sliding, mla
    window_tokens: int | None
    count: int  # number of groups of this type
    layers: int  # layers of this type on the stage
    block_size: int  # tokens per block (scaled up when page sizes are unified)
    page_bytes: int  # one block of one layer

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """`KVCacheSpec.max_memory_usage_bytes / page_size` for one request (doc section 6)."""
        if self.kind == "sliding" and self.window_tokens:
            tokens = min(self.window_tokens - 1 + max_num_batched_tokens, max_model_len)
            return ceil(tokens / self.block_size) + 1
        return ceil(max_model_len / self.block_size)


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage (every TP rank of it is identical)."""

    pp_rank: int
    layers: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    available_kv_cache_bytes: int
    groups: tuple[KvGroup, ...]
    group_size: int  # layers sharing one block id (tensors in the pool)
    block_bytes: int  # bytes of one block id: page x group_size (uniform-type: sum of pages)
    num_blocks: int


@dataclass(frozen=True)
class CapacityPlan:
    spec_name: str
    args: EngineArgs
    version: tuple[int, int, int]
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    defaults_rule: str  # which defaults were chosen and why
    defaulted: tuple[str, ...]  # flags whose value kvplan chose as vLLM would
    gpu_memory_bytes: int | None
    requested_bytes: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    cudagraph_subtracted: bool
    available_kv_cache_bytes: int
    block_bytes: int
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    blocks_per_request: int
    kv_bytes_per_request: int  # vLLM's "KV cache is needed" for one max_model_len request
    estimated_max_model_len: int  # binary search as vLLM; == max_model_len when it fits
    fits: bool
    error: str | None
    stages: tuple[StagePlan, ...]
    init_outside_budget_bytes: int
    warnings: tuple[str, ...] = field(default=())

    @property
    def tp(self) -> int:
        return self.args.tensor_parallel_size

    @property
    def groups(self) -> tuple[KvGroup, ...]:
        return self.binding_stage.groups

    @property
    def binding_stage(self) -> StagePlan:
        return min(self.stages, key=lambda s: s.num_blocks)

    @property
    def device_peak_bytes(self) -> int:
        """Roughly what nvidia-smi shows once serving: init + requested (+ graphs if not budgeted)."""
        extra = 0 if self.cudagraph_subtracted else self.cudagraph_bytes
        return self.init_outside_budget_bytes + self.requested_bytes + extra


def gib(n: float) -> str:
    """vLLM's `format_gib`: two decimals of GiB."""
    return f"{n / GIB:.2f}"


# --- grouping (vllm/v1/core/kv_cache_utils.py get_kv_cache_groups) -------------------------
def kv_groups(spec: ModelSpec, layer_indices: list[int] | range, block_size: int, kv_cache_dtype: str,
              tp: int) -> tuple[tuple[KvGroup, ...], int, int]:
    """(group types, group_size, block_bytes) for the layers of one stage."""
    kinds: dict[tuple[str, int | None], list[int]] = {}
    pages: dict[tuple[str, int | None], set[int]] = {}
    for i in layer_indices:
        layer = spec.layers[i]
        if layer.kind == "none":
            continue
        key = (layer.kind, layer.window_tokens if layer.kind == "sliding" else None)
        kinds.setdefault(key, []).append(i)
        pages.setdefault(key, set()).add(bytes_per_block(spec, block_size, kv_cache_dtype, tp, 1, layer_indices=[i]))
    if not kinds:
        return (), 0, 0
    if len(kinds) == 1:
        (key, idx), = kinds.items()
        if len(pages[key]) == 1:  # uniform: one group, every layer its own tensor
            page = next(iter(pages[key]))
            return (KvGroup(key[0], key[1], 1, len(idx), block_size, page),), len(idx), page * len(idx)
        total = bytes_per_block(spec, block_size, kv_cache_dtype, tp, 1, layer_indices=idx)  # UniformTypeKVCacheSpecs
        return (KvGroup(key[0], key[1], 1, len(idx), block_size, total),), 1, total
    # hybrid: unify page sizes by scaling block sizes, then groups of `group_size` layers
    page_of = {k: max(p) for k, p in pages.items()}
    max_page = max(page_of.values())
    counts = [len(v) for v in kinds.values()]
    group_size = min(counts)
    if max(counts) < group_size * HYBRID_GROUP_RATIO:
        group_size = max(counts)
    groups = []
    for key, idx in kinds.items():
        ratio = max_page // page_of[key] if max_page % page_of[key] == 0 else 1
        groups.append(KvGroup(key[0], key[1], ceil(len(idx) / group_size), len(idx), block_size * ratio, max_page))
    return tuple(groups), group_size, max_page * group_size


def needed_bytes(spec: ModelSpec, layer_indices: list[int] | range, args: EngineArgs, max_model_len: int,
                 max_num_batched_tokens: int) -> int:
    """`max_memory_usage_bytes` summed over the stage's layers (vLLM's "KV cache is needed")."""
    total = 0
    for i in layer_indices:
        layer = spec.layers[i]
        if layer.kind == "none":
            continue
        page = bytes_per_block(spec, args.block_size, args.kv_cache_dtype, args.tensor_parallel_size, 1, layer_indices=[i])
        g = KvGroup(layer.kind, layer.window_tokens, 1, 1, args.block_size, page)
        total += g.blocks_per_request(max_model_len, max_num_batched_tokens) * page
    return total


def estimate_max_model_len(spec: ModelSpec, layer_indices: list[int] | range, args: EngineArgs,
                           available_bytes: int, max_model_len: int, max_num_batched_tokens: int) -> int:
    """vLLM's `estimate_max_model_len`: binary search over [1, max_model_len]; 0 if nothing fits."""
    def fits(n: int) -> bool:
        return needed_bytes(spec, layer_indices, args, n, max_num_batched_tokens) <= available_bytes

    if not fits(1):
        return 0
    lo, hi, best = 1, max_model_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


# --- the plan ------------------------------------------------------------------------------
def plan_capacity(spec: ModelSpec, args: EngineArgs) -> CapacityPlan:
    """Predict vLLM's start-up figures for `spec` served with `args` (one GPU per rank)."""
    args.validate(spec)
    given = args
    # "auto" KV dtype follows the *served* dtype (--dtype float32 gives a float32 cache)
    args = replace(args, kv_cache_dtype=resolve_kv_dtype(args.kv_cache_dtype, oh.model_dtype(spec, args.dtype)).name)
    version = oh.parse_vllm_version(args.vllm_version)
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    warnings: list[str] = []
    mml = args.max_model_len or spec.max_position_embeddings
    if args.max_model_len and args.max_model_len > spec.max_position_embeddings:
        warnings.append(f"--max-model-len {args.max_model_len} exceeds {spec.name}'s max_position_embeddings "
                        f"({spec.max_position_embeddings}); vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    gpu_bytes = args.gpu.memory_bytes if args.gpu is not None else None
    d = oh.batch_defaults(gpu_bytes, args.gpu.name if args.gpu else "", version, mml)
    max_num_seqs = args.max_num_seqs or d.max_num_seqs
    mnbt = args.max_num_batched_tokens or d.max_num_batched_tokens
    defaulted = tuple(f for f, v in (("max_num_seqs", args.max_num_seqs), ("max_num_batched_tokens", args.max_num_batched_tokens),
                                      ("max_model_len", args.max_model_len)) if v is None)
    if mnbt < max_num_seqs:
        warnings.append(f"--max-num-batched-tokens {mnbt} < --max-num-seqs {max_num_seqs}: vLLM rejects this")
    subtract_graphs = version >= oh.CUDAGRAPH_SUBTRACTED_SINCE and not args.enforce_eager
    requested = int(gpu_bytes * args.gpu_memory_utilization) if gpu_bytes is not None else 0
    init_bytes = oh.init_outside_budget_bytes(tp, pp)
    stages = []
    for r in range(pp):
        idx = pp_layer_range(spec.num_layers, pp, r)
        w = oh.weights_bytes_per_gpu(spec, dtype=args.dtype, quantization=args.quantization, tp=tp, pp=pp, pp_rank=r)
        a = oh.activation_bytes(spec, dtype=args.dtype, max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs,
                                tp=tp, last_stage=r == pp - 1, version=version)
        nt = oh.non_torch_bytes(tp, pp)
        cg = oh.cudagraph_bytes(spec, dtype=args.dtype, tp=tp, pp=pp, pp_rank=r, max_num_seqs=max_num_seqs,
                                enforce_eager=args.enforce_eager)
        if args.kv_cache_memory_bytes is not None:
            avail = args.kv_cache_memory_bytes
        else:
            avail = requested - w - a - nt - (cg if subtract_graphs else 0)
        groups, group_size, block_bytes = kv_groups(spec, idx, args.block_size, args.kv_cache_dtype, tp)
        blocks = max(0, avail // block_bytes) if block_bytes else 0
        stages.append(StagePlan(r, len(idx), w, a, nt, cg, avail, groups, group_size, block_bytes, blocks))
    bind = min(stages, key=lambda s: s.num_blocks)
    num_blocks = bind.num_blocks
    per_req = sum(g.count * g.blocks_per_request(mml, mnbt) for g in bind.groups)
    v1 = version >= oh.V1_SINCE
    if v1:
        max_conc = num_blocks / per_req if per_req else 0.0
    else:
        max_conc = num_blocks * args.block_size / mml
    num_groups = sum(g.count for g in bind.groups)
    if version >= oh.TOKENS_FROM_CONCURRENCY_SINCE:
        tokens = int(max_conc * mml)
    elif num_groups > 1:
        tokens = (num_blocks // num_groups) * args.block_size
    else:
        tokens = num_blocks * args.block_size

    # start-up errors, checked per worker as vLLM does
    error = None
    need = needed_bytes(spec, pp_layer_range(spec.num_layers, pp, bind.pp_rank), args, mml, mnbt)
    est_len = mml
    if args.kv_cache_memory_bytes is None and gpu_bytes is not None and requested > gpu_bytes - init_bytes:
        free = gpu_bytes - init_bytes
        error = (f"ValueError: Free memory on device ({gib(free)}/{gib(gpu_bytes)} GiB) on startup is less than desired "
                 f"GPU memory utilization ({args.gpu_memory_utilization}, {gib(requested)} GiB). Decrease GPU memory "
                 f"utilization or reduce GPU memory used by other processes.")
    for st in stages:
        if error:
            break
        idx = pp_layer_range(spec.num_layers, pp, st.pp_rank)
        if st.available_kv_cache_bytes <= 0:
            est_len = 0
            error = ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                     f"when initializing the engine. See {DOCS_URL} for more details.")
            break
        stage_need = needed_bytes(spec, idx, args, mml, mnbt)
        if not v1:
            if num_blocks * args.block_size < mml:
                est_len = num_blocks * args.block_size
                error = (f"ValueError: The model's max seq len ({mml}) is larger than the maximum number of tokens "
                         f"that can be stored in KV cache ({num_blocks * args.block_size}). Try increasing "
                         "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
            break
        if stage_need > st.available_kv_cache_bytes:
            need = stage_need
            est_len = estimate_max_model_len(spec, idx, args, st.available_kv_cache_bytes, mml, mnbt)
            hint = (f"Based on the available memory, the estimated maximum model length is {est_len}. "
                    if est_len > 0 else "")
            owner = "model's" if version >= oh.MODEL_S_WORDING_SINCE else "models's"
            error = (f"ValueError: To serve at least one request with the {owner} max seq len ({mml}), "
                     f"({gib(stage_need)} GiB KV cache is needed, which is larger than the available KV cache memory "
                     f"({gib(st.available_kv_cache_bytes)} GiB). {hint}Try increasing `gpu_memory_utilization` or "
                     f"decreasing `max_model_len` when initializing the engine. See {DOCS_URL} for more details.")
            break
    if gpu_bytes is not None and not subtract_graphs and bind.cudagraph_bytes:
        peak = init_bytes + requested + bind.cudagraph_bytes
        if peak > gpu_bytes:
            warnings.append(f"CUDA graphs (~{gib(bind.cudagraph_bytes)} GiB) are captured after the KV cache and are not "
                            f"budgeted before vLLM 0.21: about {gib(peak)} GiB would be used of {gib(gpu_bytes)} GiB, "
                            "so capture will likely OOM; lower --gpu-memory-utilization or add --enforce-eager")
    return CapacityPlan(
        spec_name=spec.name, args=given, version=version, max_model_len=mml, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt, defaults_rule=d.rule, defaulted=defaulted, gpu_memory_bytes=gpu_bytes,
        requested_bytes=requested if args.kv_cache_memory_bytes is None else args.kv_cache_memory_bytes,
        weights_bytes=bind.weights_bytes, activation_bytes=bind.activation_bytes, non_torch_bytes=bind.non_torch_bytes,
        cudagraph_bytes=bind.cudagraph_bytes, cudagraph_subtracted=subtract_graphs,
        available_kv_cache_bytes=bind.available_kv_cache_bytes, block_bytes=bind.block_bytes, num_gpu_blocks=num_blocks,
        kv_cache_tokens=tokens, max_concurrency=max_conc, blocks_per_request=per_req, kv_bytes_per_request=need,
        estimated_max_model_len=est_len, fits=error is None, error=error, stages=tuple(stages),
        init_outside_budget_bytes=init_bytes, warnings=tuple(warnings),
    )


def with_args(args: EngineArgs, **changes: object) -> EngineArgs:
    """A copy of `args` with some fields changed (what-if plans)."""
    return replace(args, **changes)
