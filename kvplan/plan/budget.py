"""The vLLM memory budget and KV-cache layout: what `vllm serve` prints at start-up.

`plan_capacity(spec, args)` follows vLLM V1's start-up:

    requested = total x gpu_memory_utilization              (or --kv-cache-memory-bytes)
    available = requested - weights - peak activation - non-torch [- CUDA graphs, v0.21+]
    num_blocks = floor(available / (page_bytes x group_size)), min over pipeline stages
    tokens, max concurrency: the two capacity log lines, whose formulas changed across versions

and reproduces vLLM's start-up errors, including the binary-searched estimated maximum model
length. Overhead models live in `kvplan.plan.overheads`. Pure Python: `kvplan estimate`
imports this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvplan.plan import overheads as oh
from kvplan.plan.encoder_profile import EncoderProfile, encoder_profile
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.groups import KvGroup, StateLayout, kv_groups, layer_cache_groups, mamba_cache_mode, state_copies
from kvplan.plan.kv import (
    blocks_in_budget,
    largest_fitting,
    pp_layer_range,
    state_page_bytes,
    unified_block_size,
)
from kvplan.spec.encoder_params import encoder_gap
from kvplan.spec.model import ModelSpec
from kvplan.units import GIB

DOCS_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"


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
    block_size: int = 16  # attention tokens per block as served (raised for hybrid state models)
    encoder: EncoderProfile | None = None  # the vision encoder's dummy batch in the profile run (first stage)


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
    block_size_tokens: int = 16  # the attention block size vLLM serves with (hybrid state models: raised)
    mamba_cache_mode: str = "none"  # state models: "none" (1 page per state layer) or "align" (2)
    state_page_bytes: int = 0  # one state layer's page for one request, padded to the attention page

    @property
    def tp(self) -> int:
        return self.args.tensor_parallel_size

    @property
    def groups(self) -> tuple[KvGroup, ...]:
        return self.binding_stage.groups

    @property
    def binding_stage(self) -> StagePlan:
        return min(self.stages, key=lambda s: s.num_blocks)


def gib(n: float) -> str:
    """vLLM's `format_gib`: two decimals of GiB."""
    return f"{n / GIB:.2f}"


# --- what one request needs (vllm/v1/core/kv_cache_utils.py) ----------------------------------
def needed_bytes(spec: ModelSpec, layer_indices: list[int] | range, args: EngineArgs, max_model_len: int,
                 max_num_batched_tokens: int) -> int:
    """`max_memory_usage_bytes` summed over the stage's layers (vLLM's "KV cache is needed"); a
    state layer needs its padded page per copy, whatever the length."""
    tp = args.tensor_parallel_size
    kv_dtype = spec.kv_dtype(args.kv_cache_dtype)
    block = unified_block_size(spec, args.block_size, kv_dtype, tp)
    copies = state_copies(spec, args.mamba_cache_mode, oh.parse_vllm_version(args.vllm_version))
    total = 0
    for i in layer_indices:
        layer = spec.layers[i]
        if layer.state is not None:
            total += copies * state_page_bytes(spec, block, kv_dtype, tp)
        for g in layer_cache_groups(spec, i, block, args.kv_cache_dtype, tp):
            total += g.blocks_per_request(max_model_len, max_num_batched_tokens) * g.page_bytes
    return total


def estimate_max_model_len(spec: ModelSpec, layer_indices: list[int] | range, args: EngineArgs,
                           available_bytes: int, max_model_len: int, max_num_batched_tokens: int) -> int:
    """vLLM's `estimate_max_model_len`: binary search over [1, max_model_len]; 0 if nothing fits."""
    # needed bytes grow with the length, so this finds what vLLM's own search finds
    return largest_fitting(
        0,
        max_model_len,
        lambda n: needed_bytes(spec, layer_indices, args, n, max_num_batched_tokens) <= available_bytes,
    )


# --- the plan ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Batch:
    """max_model_len and the batch limits in force: the user's, else vLLM's defaults."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    defaults: oh.BatchDefaults
    defaulted: tuple[str, ...]


def _batch(spec: ModelSpec, args: EngineArgs, version: tuple[int, int, int], warnings: list[str]) -> _Batch:
    mml = args.max_model_len or spec.max_position_embeddings
    if args.max_model_len and args.max_model_len > spec.max_position_embeddings and spec.max_len_known:
        warnings.append(f"--max-model-len {args.max_model_len} exceeds {spec.name}'s max_position_embeddings "
                        f"({spec.max_position_embeddings}); vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    gpu_bytes = args.gpu.memory_bytes if args.gpu is not None else None
    d = oh.batch_defaults(gpu_bytes, args.gpu.name if args.gpu else "", version, mml)
    max_num_seqs = args.max_num_seqs or d.max_num_seqs
    mnbt = args.max_num_batched_tokens or d.max_num_batched_tokens
    defaulted = tuple(
        f
        for f, v in (
            ("max_num_seqs", args.max_num_seqs),
            ("max_num_batched_tokens", args.max_num_batched_tokens),
            ("max_model_len", args.max_model_len),
        )
        if v is None
    )
    if mnbt < max_num_seqs:
        warnings.append(f"--max-num-batched-tokens {mnbt} < --max-num-seqs {max_num_seqs}: vLLM rejects this")
    return _Batch(mml, max_num_seqs, mnbt, d, defaulted)


def _stage(spec: ModelSpec, args: EngineArgs, pp_rank: int, batch: _Batch, version: tuple[int, int, int],
           requested: int, subtract_graphs: bool) -> StagePlan:
    """One pipeline stage: what is subtracted from its budget and how many blocks the rest holds."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    idx = pp_layer_range(spec.num_layers, pp, pp_rank)
    w = oh.weights_bytes_per_gpu(spec, dtype=args.dtype, quantization=args.quantization, tp=tp, pp=pp, pp_rank=pp_rank,
                                 expert_shards=args.moe_group_size)
    a = oh.activation_bytes(spec, dtype=args.dtype, max_num_batched_tokens=batch.max_num_batched_tokens,
                            max_num_seqs=batch.max_num_seqs, tp=tp, last_stage=pp_rank == pp - 1, version=version)
    encoder = None
    if spec.params.encoder and pp_rank == 0 and version >= oh.V1_SINCE and not args.skip_mm_profiling:
        # V1 profiles the encoder before the decoder
        encoder = encoder_profile(
            spec.config,
            text_hidden=spec.hidden_size,
            dtype_bytes=oh.MODEL_DTYPE_BYTES[spec.served_dtype(args.dtype)],
            tp=tp,
            max_num_batched_tokens=batch.max_num_batched_tokens,
            max_num_seqs=batch.max_num_seqs,
            max_model_len=batch.max_model_len,
            limits=dict(args.limit_mm_per_prompt or ()),
            max_pixels=args.mm_max_pixels,
        )
        if encoder is not None:
            a = encoder.activation_bytes(a, oh.ACTIVATION_C0_BYTES)
    nt = oh.non_torch_bytes(tp, pp)
    cg = oh.cudagraph_bytes(spec, dtype=args.dtype, tp=tp, pp=pp, pp_rank=pp_rank, max_num_seqs=batch.max_num_seqs,
                            enforce_eager=args.enforce_eager)
    if args.kv_cache_memory_bytes is not None:
        avail = args.kv_cache_memory_bytes
    else:
        avail = requested - w - a - nt - (cg if subtract_graphs else 0)
    block = unified_block_size(spec, args.block_size, spec.kv_dtype(args.kv_cache_dtype), tp)
    mode = mamba_cache_mode(spec, args.mamba_cache_mode, version)
    state = StateLayout(2 if mode == "align" else 1, block if mode == "align" else batch.max_model_len)
    groups, group_size, block_bytes = kv_groups(spec, idx, block, args.kv_cache_dtype, tp, state)
    return StagePlan(pp_rank, len(idx), w, a, nt, cg, avail, groups, group_size, block_bytes,
                     blocks_in_budget(avail, block_bytes), block, encoder)


def _log_lines(
    bind: StagePlan, args: EngineArgs, version: tuple[int, int, int], batch: _Batch
) -> tuple[int, float, int]:
    """(blocks per request, max concurrency, KV tokens): the two capacity log lines, whose
    formulas changed across vLLM versions."""
    mml, num_blocks = batch.max_model_len, bind.num_blocks
    per_req = sum(g.count * g.blocks_per_request(mml, batch.max_num_batched_tokens) for g in bind.groups)
    if any(g.cache is not None and not g.cache.pool_modelled for g in bind.groups):
        # DeepSeek-V4 (pool layout not modelled): the budget over one request's paged bytes
        need = sum(g.blocks_per_request(mml, batch.max_num_batched_tokens) * g.page_bytes for g in bind.groups)
        max_conc = bind.available_kv_cache_bytes / need if need else 0.0
        return -(-need // bind.block_bytes), max(0.0, max_conc), int(max(0.0, max_conc) * mml)
    if version >= oh.V1_SINCE:
        max_conc = num_blocks / per_req if per_req else 0.0
    else:
        max_conc = num_blocks * args.block_size / mml
    num_groups = sum(g.count for g in bind.groups)
    min_block = min((g.block_size for g in bind.groups), default=args.block_size)
    if version >= oh.TOKENS_FROM_CONCURRENCY_SINCE:
        tokens = int(max_conc * mml)
    elif num_groups > 1:
        tokens = (num_blocks // num_groups) * min_block
    else:
        tokens = num_blocks * min_block
    return per_req, max_conc, tokens


@dataclass(frozen=True)
class _Startup:
    error: str | None
    needed_bytes: int  # one max_model_len request on the failing (else the binding) stage
    estimated_max_model_len: int


def _startup_error(spec: ModelSpec, args: EngineArgs, version: tuple[int, int, int], batch: _Batch,
                   stages: list[StagePlan], bind: StagePlan, requested: int, init_bytes: int) -> _Startup:
    """vLLM's start-up errors, checked per worker in vLLM's order (the first one wins)."""
    pp, mml, mnbt = args.pipeline_parallel_size, batch.max_model_len, batch.max_num_batched_tokens
    need = needed_bytes(spec, pp_layer_range(spec.num_layers, pp, bind.pp_rank), args, mml, mnbt)
    gpu_bytes = args.gpu.memory_bytes if args.gpu is not None else None
    if args.kv_cache_memory_bytes is None and gpu_bytes is not None and requested > gpu_bytes - init_bytes:
        free = gpu_bytes - init_bytes
        return _Startup(
            f"ValueError: Free memory on device ({gib(free)}/{gib(gpu_bytes)} GiB) on startup is less than "
            f"desired GPU memory utilization ({args.gpu_memory_utilization}, {gib(requested)} GiB). Decrease GPU "
            f"memory utilization or reduce GPU memory used by other processes.",
            need,
            mml,
        )
    for st in stages:
        if st.available_kv_cache_bytes <= 0:
            return _Startup(
                "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                f"when initializing the engine. See {DOCS_URL} for more details.",
                need,
                0,
            )
        if version < oh.V1_SINCE:  # V0 checks the pool's token count once, against max_model_len
            pool_tokens = bind.num_blocks * args.block_size
            if pool_tokens >= mml:
                break
            return _Startup(f"ValueError: The model's max seq len ({mml}) is larger than the maximum number of tokens "
                            f"that can be stored in KV cache ({pool_tokens}). Try increasing "
                            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                            need, pool_tokens)
        idx = pp_layer_range(spec.num_layers, pp, st.pp_rank)
        stage_need = needed_bytes(spec, idx, args, mml, mnbt)
        if stage_need > st.available_kv_cache_bytes:
            est_len = estimate_max_model_len(spec, idx, args, st.available_kv_cache_bytes, mml, mnbt)
            hint = (
                f"Based on the available memory, the estimated maximum model length is {est_len}. "
                if est_len > 0
                else ""
            )
            owner = "model's" if version >= oh.MODEL_S_WORDING_SINCE else "models's"
            return _Startup(f"ValueError: To serve at least one request with the {owner} max seq len ({mml}), "
                            f"({gib(stage_need)} GiB KV cache is needed, which is larger than the available KV cache "
                            f"memory ({gib(st.available_kv_cache_bytes)} GiB). {hint}Try increasing "
                            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. "
                            f"See {DOCS_URL} for more details.", stage_need, est_len)
    return _Startup(None, need, mml)


def _cudagraph_warning(
    args: EngineArgs, bind: StagePlan, requested: int, init_bytes: int, subtract_graphs: bool
) -> str | None:
    """Before v0.21 vLLM captures CUDA graphs after sizing the pool: warn when they cannot fit."""
    gpu_bytes = args.gpu.memory_bytes if args.gpu is not None else None
    if gpu_bytes is None or subtract_graphs or not bind.cudagraph_bytes:
        return None
    peak = init_bytes + requested + bind.cudagraph_bytes
    if peak <= gpu_bytes:
        return None
    return (f"CUDA graphs (~{gib(bind.cudagraph_bytes)} GiB) are captured after the KV cache and are not "
            f"budgeted before vLLM 0.21: about {gib(peak)} GiB would be used of {gib(gpu_bytes)} GiB, "
            "so capture will likely OOM; lower --gpu-memory-utilization or add --enforce-eager")


def _encoder_warnings(spec: ModelSpec, args: EngineArgs, encoder: EncoderProfile | None) -> list[str]:
    """What the plan says of a multimodal model's encoders: the profile batch, or what is not modelled."""
    warnings: list[str] = []
    if encoder is not None:
        warnings.append(
            f"{spec.name}: vLLM profiles the vision encoder on {encoder.items} {encoder.modality} item(s) of "
            f"{encoder.tokens_per_item:,} tokens ({encoder.items * encoder.patches_per_item:,} ViT patches): "
            f"{gib(encoder.forward_peak_bytes)} GiB at the encoder's peak and {gib(encoder.cache_bytes)} GiB of "
            "outputs beside the decoder's dummy forward, charged to the activation (predicted from vLLM's "
            "rules; --limit-mm-per-prompt image=0,video=0 plans a text-only deployment)"
        )
    elif spec.params.encoder and args.skip_mm_profiling:
        warnings.append(f"{spec.name}: --skip-mm-profiling: the vision encoder's activations are not reserved, so a "
                        "request with images can run out of memory at the KV cache vLLM sized without them")
    elif spec.params.encoder:
        warnings.append(
            f"{spec.name}: vLLM's encoder profiling is not modelled for this "
            "tower or version (a dummy multimodal batch in the profile run), so KV may be over-predicted by a few "
            "percent; "
            "--limit-mm-per-prompt image=0,video=0 plans a text-only deployment"
        )
    gap = encoder_gap(spec.config)
    if gap and spec.checkpoint_weights_bytes is None:
        warnings.append(
            f"{spec.name}: {gap}; a local model directory with its safetensors gives the exact weight bytes"
        )
    return warnings


def plan_capacity(spec: ModelSpec, args: EngineArgs) -> CapacityPlan:
    """Predict vLLM's start-up figures for `spec` served with `args` (one GPU per rank)."""
    args.validate(spec)
    given = args
    # "auto" KV dtype follows the *served* dtype (--dtype float32 gives a float32 cache)
    args = replace(args, kv_cache_dtype=spec.kv_dtype(args.kv_cache_dtype, spec.served_dtype(args.dtype)).name)
    version = oh.parse_vllm_version(args.vllm_version)
    warnings: list[str] = []
    batch = _batch(spec, args, version, warnings)
    gpu_bytes = args.gpu.memory_bytes if args.gpu is not None else None
    subtract_graphs = version >= oh.CUDAGRAPH_SUBTRACTED_SINCE and not args.enforce_eager
    requested = int(gpu_bytes * args.gpu_memory_utilization) if gpu_bytes is not None else 0
    init_bytes = oh.init_outside_budget_bytes(args.tensor_parallel_size, args.pipeline_parallel_size)
    stages = [
        _stage(spec, args, r, batch, version, requested, subtract_graphs) for r in range(args.pipeline_parallel_size)
    ]
    bind = min(stages, key=lambda s: s.num_blocks)
    per_req, max_conc, tokens = _log_lines(bind, args, version, batch)
    startup = _startup_error(spec, args, version, batch, stages, bind, requested, init_bytes)
    graphs = _cudagraph_warning(args, bind, requested, init_bytes, subtract_graphs)
    if graphs:
        warnings.append(graphs)
    warnings += _encoder_warnings(spec, args, stages[0].encoder)
    if spec.has_state and version < oh.V1_HYBRID_ALLOCATOR_SINCE:
        warnings.append(f"vLLM {'.'.join(map(str, version))} kept Mamba state outside the KV cache pool; kvplan models "
                        "the V1 hybrid allocator of vLLM 0.10 and later, so its figures for this model are approximate")
    kv_dtype = spec.kv_dtype(args.kv_cache_dtype)
    return CapacityPlan(
        spec_name=spec.name, args=given, version=version, max_model_len=batch.max_model_len,
        max_num_seqs=batch.max_num_seqs, max_num_batched_tokens=batch.max_num_batched_tokens,
        defaults_rule=batch.defaults.rule, defaulted=batch.defaulted, gpu_memory_bytes=gpu_bytes,
        requested_bytes=requested if args.kv_cache_memory_bytes is None else args.kv_cache_memory_bytes,
        weights_bytes=bind.weights_bytes, activation_bytes=bind.activation_bytes, non_torch_bytes=bind.non_torch_bytes,
        cudagraph_bytes=bind.cudagraph_bytes, cudagraph_subtracted=subtract_graphs,
        available_kv_cache_bytes=bind.available_kv_cache_bytes, block_bytes=bind.block_bytes,
        num_gpu_blocks=bind.num_blocks, kv_cache_tokens=tokens, max_concurrency=max_conc, blocks_per_request=per_req,
        kv_bytes_per_request=startup.needed_bytes, estimated_max_model_len=startup.estimated_max_model_len,
        fits=startup.error is None, error=startup.error, stages=tuple(stages),
        init_outside_budget_bytes=init_bytes, warnings=tuple(warnings), block_size_tokens=bind.block_size,
        mamba_cache_mode=mamba_cache_mode(spec, args.mamba_cache_mode, version),
        state_page_bytes=state_page_bytes(spec, bind.block_size, kv_dtype, args.tensor_parallel_size),
    )
