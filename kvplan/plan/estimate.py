"""`kvplan estimate`: the KV bill for N requests of L tokens, variants, and whether it fits.

Pure computation returning plain dataclasses; the CLI renders them. `to_json` keys are a
stable interface (other tools and CI parse them).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvplan.errors import KvplanError
from kvplan.plan.budget import CapacityPlan, plan_capacity
from kvplan.plan.catalog_fit import GpuFit, catalog_fits
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.explain import length_note, vllm_default_note
from kvplan.plan.fit import Fit, fit_on_gpu
from kvplan.plan.fixes import Fix, Recommendation
from kvplan.plan.groups import state_copies
from kvplan.plan.kv import KvLayout
from kvplan.plan.overheads import model_weights_bytes, parse_vllm_version
from kvplan.plan.search import planned_serve_line
from kvplan.spec.dtypes import vllm_kv_cache_dtype
from kvplan.spec.model import ModelSpec

DEFAULT_CTX_TOKENS = 4096  # --ctx when neither --ctx nor --max-model-len is given
NO_GPU_HINT = ("for vLLM's own budget on one GPU, its `vllm serve` line and the fixes: add --gpu NAME "
               "(kvplan gpus lists them) or --gpu-memory-gib N")


@dataclass(frozen=True)
class Variant:
    label: str
    kv_bytes_per_token: int
    kv_bytes_per_request: int
    kv_bytes_total: int
    fits: bool | None
    max_concurrency_at_ctx: int | None


@dataclass(frozen=True)
class Lengths:
    """--ctx and max_model_len as planned, and which of them the user gave."""

    ctx_tokens: int
    max_model_len: int
    ctx_given: bool
    max_model_len_given: bool
    model_max_tokens: int  # max_position_embeddings: vLLM's default max_model_len


def resolve_lengths(spec: ModelSpec, ctx_tokens: int | None, max_model_len: int | None) -> Lengths:
    """--ctx defaults to --max-model-len, and max_model_len to --ctx (not to the model's maximum, so
    the plan and the `vllm serve` line are for the requests asked about); neither may pass the
    model's maximum context."""
    limit = spec.max_position_embeddings
    if ctx_tokens is not None and ctx_tokens <= 0:  # --max-model-len: EngineArgs checks it
        raise KvplanError(f"--ctx must be a positive number of tokens, got {ctx_tokens}")
    for flag, value in (("--ctx", ctx_tokens), ("--max-model-len", max_model_len)):
        if value is not None and value > limit and spec.max_len_known:  # no length in the config: vLLM takes the user's
            raise KvplanError(f"{flag} {value} is beyond {spec.name}'s maximum context of {limit} tokens "
                              f"(max_position_embeddings); give {flag} of at most {limit}")
    if ctx_tokens and max_model_len and ctx_tokens > max_model_len:
        raise KvplanError(f"--ctx {ctx_tokens} is longer than --max-model-len {max_model_len}")
    ctx = ctx_tokens or max_model_len or min(DEFAULT_CTX_TOKENS, limit)
    return Lengths(ctx, max_model_len or ctx, ctx_tokens is not None, max_model_len is not None, limit)


@dataclass(frozen=True)
class Estimate:
    spec: ModelSpec
    layout: KvLayout
    ctx_tokens: int
    concurrency: int
    max_model_len: int
    prefix_tokens: int
    kv_bytes_per_request: int  # whole model (one replica of each layer's cache), paged
    kv_bytes_per_request_exact: int
    kv_bytes_per_request_all_full: int
    kv_bytes_total: int  # whole model
    kv_bytes_total_contiguous: int  # whole model
    weights_bytes: int  # whole model, as loaded (a runtime --quantization applied)
    fit: Fit | None
    variants: tuple[Variant, ...]
    warnings: tuple[str, ...] = field(default=())
    lengths: Lengths | None = None
    notes: tuple[str, ...] = field(default=())  # on-screen lines: the max_model_len planned, vLLM's default
    hint: str | None = None  # how to get a fit answer when there is none (no GPU)
    catalog: tuple[GpuFit, ...] = ()  # without a GPU: each catalog GPU, whether the batch fits it and at what TP
    serve_command: str | None = None  # with a GPU: the `vllm serve` line of the configuration asked about


def _check(concurrency: int, prefix_tokens: int, ctx_tokens: int) -> None:
    if concurrency <= 0:
        raise KvplanError(f"--concurrency must be positive, got {concurrency}")
    if prefix_tokens < 0:
        raise KvplanError(f"--prefix-tokens must be >= 0, got {prefix_tokens}")
    if prefix_tokens > ctx_tokens:
        raise KvplanError(f"--prefix-tokens {prefix_tokens} is longer than --ctx {ctx_tokens}")


def _notes(spec: ModelSpec, lengths: Lengths, fit: Fit | None) -> tuple[str, ...]:
    """The max_model_len planned and, with a GPU, what vLLM would do at its own default."""
    note = length_note(spec.name, lengths.model_max_tokens, lengths.ctx_tokens, lengths.max_model_len,
                       lengths.ctx_given, lengths.max_model_len_given)
    notes = [note] if note else []
    if fit is not None and not lengths.max_model_len_given and lengths.max_model_len != lengths.model_max_tokens:
        try:
            default = plan_capacity(spec, replace(fit.capacity.args, max_model_len=None))
        except KvplanError:
            default = None
        if default is not None:
            notes.append(vllm_default_note(default, lengths.max_model_len))
    args = fit.capacity.args if fit is not None else None
    if args is not None and args.data_parallel_size > 1:
        moe = " (a MoE model's experts are spread over all of them" + (
            ", expert-parallel)" if args.enable_expert_parallel else ", tensor-parallel)"
        )
        notes.append(
            f"--data-parallel-size {args.data_parallel_size}: {args.data_parallel_size} engine replicas of "
            f"{args.tensor_parallel_size} GPU(s), each with its own KV pool; the requests are spread over them, "
            f"and per-GPU figures are one replica's{moe if spec.params.experts else ''}"
        )
    return tuple(notes)


def estimate(spec: ModelSpec, engine: EngineArgs, *, ctx_tokens: int | None = None, concurrency: int = 1,
             prefix_tokens: int = 0) -> Estimate:
    """The KV bill of `concurrency` requests of `ctx_tokens` served with `engine` (its KV dtype,
    block size, TP/PP) and, when it can plan capacity (a GPU, or the KV bytes), whether they fit.
    Lengths follow `resolve_lengths`: a missing --ctx is --max-model-len, a missing max_model_len is --ctx."""
    lengths = resolve_lengths(spec, ctx_tokens, engine.max_model_len)
    ctx, mml = lengths.ctx_tokens, lengths.max_model_len
    _check(concurrency, prefix_tokens, ctx)
    kv_cache_dtype, block_size = engine.kv_cache_dtype, engine.block_size
    tp, pp = engine.tensor_parallel_size, engine.pipeline_parallel_size
    # state pages per request as vLLM keeps them (2 in the "align" prefix-caching mode, 0.28+ hybrids)
    copies = state_copies(spec, engine.mamba_cache_mode, parse_vllm_version(engine.vllm_version))
    layout = KvLayout.of(spec, kv_cache_dtype, block_size, tp, pp, state_copies=copies)
    planned = engine.plans_capacity

    def variant(label: str, lay: KvLayout, prefix: int = 0) -> Variant:
        total = lay.batch_bytes(ctx, concurrency, prefix_tokens=prefix)
        fits = maxc = None
        if planned:
            f = fit_on_gpu(lay, spec, ctx, concurrency, prefix, engine, mml)
            fits, maxc = f.fits, f.max_concurrency_at_ctx
        return Variant(label, lay.bytes_per_token(), lay.request_bytes(ctx), total, fits, maxc)

    variants = _what_ifs(spec, engine, layout, variant, concurrency, ctx, prefix_tokens, copies)
    fit = fit_on_gpu(layout, spec, ctx, concurrency, prefix_tokens, engine, mml) if planned else None
    return Estimate(
        warnings=spec.warnings,
        spec=spec,
        layout=layout,
        ctx_tokens=ctx,
        concurrency=concurrency,
        max_model_len=mml,
        prefix_tokens=prefix_tokens,
        kv_bytes_per_request=layout.request_bytes(ctx),
        kv_bytes_per_request_exact=layout.request_bytes(ctx, paged=False),
        kv_bytes_per_request_all_full=layout.request_bytes_all_full(ctx),
        kv_bytes_total=layout.batch_bytes(ctx, concurrency, prefix_tokens=prefix_tokens),
        kv_bytes_total_contiguous=concurrency * layout.contiguous_request_bytes(mml),
        weights_bytes=model_weights_bytes(spec, engine.dtype, engine.quantization),
        fit=fit,
        variants=tuple(variants),
        lengths=lengths,
        notes=_notes(spec, lengths, fit),
        hint=None if fit else NO_GPU_HINT,
        catalog=() if planned else catalog_fits(spec, engine, ctx, concurrency, prefix_tokens, mml, copies),
        serve_command=_as_asked(spec, engine, layout, fit, mml, concurrency),
    )


def _as_asked(spec: ModelSpec, engine: EngineArgs, layout: KvLayout, fit: Fit | None, max_model_len: int,
              concurrency: int) -> str | None:
    """The `vllm serve` line of the configuration asked about; None without a GPU, or when vLLM has no
    flag for its KV dtype (int8/int4 are planned only: the fixes and variants say so)."""
    if fit is None or vllm_kv_cache_dtype(layout.kv_dtype, spec.served_dtype(engine.dtype)) is None:
        return None
    return planned_serve_line(spec, replace(engine, max_model_len=max_model_len), fit.capacity, concurrency)


def _what_ifs(spec: ModelSpec, engine: EngineArgs, layout: KvLayout, variant: Callable[..., Variant],
              concurrency: int, ctx: int, prefix_tokens: int, copies: int) -> list[Variant]:
    """The request as asked, then what another KV dtype, halved KV heads or a shared prefix would make of it."""
    kv_cache_dtype, block_size = engine.kv_cache_dtype, engine.block_size
    tp, pp = engine.tensor_parallel_size, engine.pipeline_parallel_size
    variants = [variant(f"as asked ({layout.kv_dtype.name} KV)", layout)]
    for alt in ("fp8", "int4"):
        try:
            alt_layout = KvLayout.of(spec, alt, block_size, tp, pp, state_copies=copies)
        except KvplanError:  # a model with one cache layout (DeepSeek-V4) has no what-if dtype
            continue
        if alt_layout.kv_dtype != layout.kv_dtype:  # DeepSeek-V3.2: fp8 is its fp8_ds_mla default
            variants.append(
                variant(f"{alt} KV" + (" (no vLLM flag)" if alt == "int4" else ""), alt_layout)
            )
    if (
        not spec.is_mla
        and spec.num_kv_heads > 1
        and spec.num_kv_heads == spec.num_attention_heads
        and spec.num_kv_heads % 2 == 0
    ):
        gqa = spec.with_kv_heads(spec.num_kv_heads // 2)
        variants.append(
            variant(
                f"GQA: {spec.num_kv_heads // 2} KV heads (another model)",
                KvLayout.of(gqa, kv_cache_dtype, block_size, tp, pp, state_copies=copies),
            )
        )
    share = prefix_tokens or min(ctx // 2, 1024)
    if concurrency > 1 and share >= block_size:
        variants.append(variant(f"a {share:,}-token shared prefix", layout, share))
    return variants


FIGURE_SCOPES = {
    "whole model": "one replica of each layer's cache, the same at any TP/PP: kv_bytes_per_token, "
    "state_bytes_per_request "
    "(Mamba / Gated-DeltaNet state, fixed per request, unpadded, one copy), "
    "kv_bytes_per_request*, kv_bytes_total, kv_bytes_total_contiguous, weights_bytes, variants",
    "per GPU": "what one GPU of the busiest pipeline stage holds (KV heads split by TP, replicated when tp > KV heads; "
    "MLA latent replicated on every TP rank; PP splits layers): *_per_gpu, kv_bytes_per_block and "
    "vLLM's capacity keys",
    "all GPUs": "every TP rank and PP stage together, replicas included: kv_bytes_per_token_all_gpus",
}


def _kv_json(est: Estimate) -> dict[str, Any]:
    """The KV bill, each key named by its scope (FIGURE_SCOPES)."""
    lay = est.layout
    return {
        "kv_bytes_per_token": lay.bytes_per_token(),
        "kv_bytes_per_token_per_gpu": lay.bytes_per_token_per_gpu(),
        "state_bytes_per_request": lay.state_bytes_per_request(),
        "state_bytes_per_request_per_gpu": lay.state_bytes_per_request_per_gpu(),
        "kv_bytes_per_token_all_gpus": lay.bytes_per_token_all_gpus(),
        "kv_bytes_per_block": lay.bytes_per_block(),
        "kv_bytes_per_block_per_gpu": lay.bytes_per_block(),
        "kv_bytes_per_request": est.kv_bytes_per_request,
        "kv_bytes_per_request_per_gpu": lay.request_bytes_per_gpu(est.ctx_tokens),
        "kv_bytes_per_request_exact": est.kv_bytes_per_request_exact,
        "kv_bytes_per_request_all_layers_full": est.kv_bytes_per_request_all_full,
        "kv_bytes_total": est.kv_bytes_total,
        "kv_bytes_total_per_gpu": lay.batch_bytes_per_gpu(
            est.ctx_tokens, est.concurrency, prefix_tokens=est.prefix_tokens
        ),
        "kv_bytes_total_contiguous": est.kv_bytes_total_contiguous,
    }


def _fit_json(f: Fit, fixes: Sequence[Fix]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "gpu": f.gpu.name if f.gpu else None,
        "gpu_memory_bytes": f.gpu.memory_bytes if f.gpu else None,
        "gpu_memory_utilization": f.gpu_memory_utilization,
        "weights_bytes_per_gpu": f.weights_bytes_per_gpu,
        "kv_available_bytes_per_gpu": f.kv_available_bytes_per_gpu,
        "kv_needed_bytes_per_gpu": f.kv_needed_bytes_per_gpu,
        "fits": f.fits,
        "weights_fit": f.weights_fit,
        "memory_shortfall": f.shortfall,
        "max_concurrency_at_ctx": f.max_concurrency_at_ctx,
        "max_ctx_at_concurrency": f.max_ctx_at_concurrency,
        "max_concurrency_note": f.vllm_concurrency_note,
    }
    out.update(capacity_json(f.capacity))
    out["vllm_fixes"] = [
        {
            "rank": x.rank,
            "fix": x.title,
            "flags": x.flags,
            "effect": x.effect,
            "enough": x.fits,
            "risk": x.risk,
            "gpus": x.gpus,
            "gpu": x.gpu_name or (f.gpu.name if f.gpu else None),
            "max_concurrency": round(x.plan.max_concurrency, 4) if x.plan is not None and x.plan.fits else None,
            "kv_cache_tokens": x.plan.kv_cache_tokens if x.plan is not None and x.plan.fits else None,
        }
        for x in fixes
    ]
    return out


def to_json(est: Estimate, fixes: Sequence[Fix] = (), rec: Recommendation | None = None) -> dict[str, Any]:
    """Stable keys; bytes are integers; each KV key's scope is in `figure_scopes`. With a GPU: vLLM's
    capacity keys and `vllm_fixes`; without one `fits` is null and `hint` says how to get an answer;
    with a recommendation: the `vllm serve` line that meets the target."""
    lay, spec = est.layout, est.spec
    lengths = est.lengths
    out: dict[str, Any] = {
        "model": spec.name, "hf_id": spec.hf_id, "ctx": est.ctx_tokens, "concurrency": est.concurrency,
        "kv_cache_dtype": lay.kv_dtype.name, "block_size": lay.block_size, "tp": lay.tp, "pp": lay.pp,
        "max_model_len": est.max_model_len, "max_model_len_given": bool(lengths and lengths.max_model_len_given),
        "model_max_tokens": spec.max_position_embeddings, "prefix_tokens": est.prefix_tokens,
        "num_layers": spec.num_layers, "attention_layers": spec.attention_kinds,
        **_kv_json(est),
        "weights_bytes": est.weights_bytes, "num_parameters": spec.params.total,
        "num_encoder_parameters": spec.params.encoder, "dtype": spec.dtype,
        "weight_quantization": (est.fit.capacity.args.quantization if est.fit and est.fit.capacity.args.quantization
                                and spec.quant.method == "none" else spec.quant.method),
        "variants": [v.__dict__ for v in est.variants], "warnings": list(est.warnings), "notes": list(est.notes),
        "figure_scopes": FIGURE_SCOPES,
    }
    if est.fit:
        out.update(_fit_json(est.fit, fixes))
        out["vllm_serve"] = est.serve_command
    else:
        out.update({"fits": None, "max_concurrency_at_ctx": None, "hint": est.hint,
                    "catalog_gpus": [{"gpu": g.gpu.name, "tp": g.tp, "fits": g.fits,
                                      "max_concurrency_at_ctx": g.max_concurrency_at_ctx} for g in est.catalog]})
    if rec is not None:
        out["recommended_command"] = rec.command if rec.met else None
        out["recommendation"] = rec.note
    return out


def capacity_json(plan: CapacityPlan) -> dict[str, Any]:
    """The vLLM capacity keys of `kvplan estimate --json` (per GPU; bytes are integers). The per-GPU
    weights as vLLM loads them are `weights_bytes_per_gpu`; `weights_bytes` is the whole model."""
    return {
        "activation_bytes": plan.activation_bytes,
        "non_torch_bytes": plan.non_torch_bytes, "cudagraph_bytes": plan.cudagraph_bytes,
        "cudagraph_subtracted": plan.cudagraph_subtracted, "requested_bytes": plan.requested_bytes,
        "available_kv_cache_bytes": plan.available_kv_cache_bytes, "num_gpu_blocks": plan.num_gpu_blocks,
        "kv_cache_tokens": plan.kv_cache_tokens, "max_concurrency": round(plan.max_concurrency, 4),
        "vllm_max_model_len": plan.max_model_len, "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens, "vllm_version": ".".join(map(str, plan.version)),
        "vllm_fits": plan.fits, "vllm_error": plan.error, "estimated_max_model_len": plan.estimated_max_model_len,
        "vllm_block_size": plan.block_size_tokens, "mamba_cache_mode": plan.mamba_cache_mode,
        "state_page_bytes": plan.state_page_bytes,
        "encoder_profile": _encoder_json(plan.stages[0].encoder), "vllm_warnings": list(plan.warnings),
    }


def _encoder_json(e: Any) -> dict[str, Any] | None:
    """The vision encoder's dummy batch in vLLM's profile run (None: no tower, or not modelled)."""
    if e is None:
        return None
    return {
        "family": e.family,
        "modality": e.modality,
        "tokens_per_item": e.tokens_per_item,
        "items": e.items,
        "patches_per_item": e.patches_per_item,
        "forward_peak_bytes": e.forward_peak_bytes,
        "cache_bytes": e.cache_bytes,
    }
