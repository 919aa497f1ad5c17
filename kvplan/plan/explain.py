"""Sentences that explain a plan: why the weights leave no room, why vLLM's concurrency line and
kvplan's differ, which max_model_len was planned and what vLLM's default would do.

Pure Python (`kvplan estimate` imports it). Every sentence names the figures it compares.
"""
from __future__ import annotations

from kvplan.plan.budget import CapacityPlan
from kvplan.plan.kv import KvLayout
from kvplan.units import GIB


def _g(n: int | float, digits: int = 2) -> str:
    return f"{n / GIB:,.{digits}f} GiB"


def weights_per_gpu_bytes(plan: CapacityPlan) -> int:
    """Weights on the most loaded GPU (first/last pipeline stages also hold embedding / LM head)."""
    return max(s.weights_bytes for s in plan.stages)


def weights_fit(plan: CapacityPlan) -> bool:
    """Whether the weights alone fit in what vLLM may use of one GPU (always with --kv-cache-memory-bytes)."""
    if plan.args.kv_cache_memory_bytes is not None or plan.gpu_memory_bytes is None:
        return True
    return weights_per_gpu_bytes(plan) <= plan.requested_bytes


def memory_shortfall(plan: CapacityPlan) -> str | None:
    """Why no KV cache memory is left on a GPU, or None when some is: the weights alone, or the
    weights plus activation, non-torch memory and CUDA graphs."""
    a = plan.args
    if a.kv_cache_memory_bytes is not None or plan.gpu_memory_bytes is None or plan.available_kv_cache_bytes > 0:
        return None
    budget = (f"{_g(plan.requested_bytes, 1)} ({_g(plan.gpu_memory_bytes, 1)} x {a.gpu_memory_utilization:g}) "
              f"on one GPU at tp {a.tensor_parallel_size} pp {a.pipeline_parallel_size}")
    if not weights_fit(plan):
        return (f"weights {_g(weights_per_gpu_bytes(plan), 1)} per GPU do not fit in {budget}: "
                "split them over more GPUs (TP/PP), quantize them, or use a larger GPU")
    bind = plan.binding_stage
    used = (
        bind.weights_bytes
        + bind.activation_bytes
        + bind.non_torch_bytes
        + (bind.cudagraph_bytes if plan.cudagraph_subtracted else 0)
    )
    graphs = f" + CUDA graphs {_g(bind.cudagraph_bytes)}" if plan.cudagraph_subtracted else ""
    return (f"weights {_g(bind.weights_bytes)} + activation {_g(bind.activation_bytes)} + non-torch "
            f"{_g(bind.non_torch_bytes)}{graphs} = {_g(used)} per GPU leave no KV cache memory in {budget}")


def length_note(model_name: str, model_max_tokens: int, ctx_tokens: int, max_model_len: int, ctx_given: bool,
                max_model_len_given: bool) -> str | None:
    """Which max_model_len was planned when the user did not give both --ctx and --max-model-len."""
    if max_model_len_given and not ctx_given:
        return f"--ctx {ctx_tokens:,} = --max-model-len (requests as long as vLLM will accept)"
    if max_model_len_given:
        return None
    source = "--ctx" if ctx_given else f"--ctx {ctx_tokens:,} (the default; give --ctx to change it)"
    if max_model_len == model_max_tokens:
        return (
            f"planned max_model_len {max_model_len:,} = {source}, which is also vLLM's default ({model_name}'s maximum)"
        )
    return (f"planned max_model_len {max_model_len:,} = {source}: vLLM's default would be {model_name}'s maximum "
            f"{model_max_tokens:,}, so serve with --max-model-len {max_model_len}")


def vllm_default_note(default: CapacityPlan, max_model_len: int) -> str:
    """What `vllm serve` would do without --max-model-len (at the model's maximum)."""
    if default.fits:
        return (f"without --max-model-len vLLM would start at {default.max_model_len:,} tokens: "
                f"{default.kv_cache_tokens:,} KV tokens, {default.max_concurrency:.2f}x at {default.max_model_len:,}")
    if not weights_fit(default) or default.estimated_max_model_len <= 0:
        return (
            f"without --max-model-len vLLM would try {default.max_model_len:,} tokens "
            "and not start (no KV cache memory)"
        )
    return (
        f"without --max-model-len vLLM would refuse to start at {default.max_model_len:,} tokens (its estimated "
        f"maximum model length is {default.estimated_max_model_len:,}); --max-model-len {max_model_len} avoids that"
    )


def _window_reason(plan: CapacityPlan, ctx_tokens: int) -> str | None:
    sliding = [g for g in plan.groups if g.kind == "sliding" and g.window_tokens]
    if not sliding:
        return None
    w = int(sliding[0].window_tokens or 0)
    if min(w - 1 + plan.max_num_batched_tokens, plan.max_model_len) <= min(w, ctx_tokens):
        return None  # vLLM reserves no more than kvplan counts
    return (f"vLLM reserves min(window {w:,} - 1 + {plan.max_num_batched_tokens:,} batched tokens, max_model_len) "
            f"tokens + 1 block per sliding layer (room for a prefill chunk), kvplan the {w:,} tokens a sliding layer "
            "keeps once its window has slid")


def _group_reason(plan: CapacityPlan) -> str | None:
    bind = plan.binding_stage
    slots = sum(g.count for g in bind.groups) * bind.group_size
    layers = sum(g.layers for g in bind.groups)
    if len(bind.groups) < 2 or slots <= layers:
        return None
    return (f"vLLM's blocks span {bind.group_size} layers each, so its {sum(g.count for g in bind.groups)} KV groups "
            f"pay for {slots} layer slots for {layers} layers")


def concurrency_note(layout: KvLayout, plan: CapacityPlan, ctx_tokens: int, prefix_tokens: int,
                     kvplan_concurrency: int) -> str | None:
    """Why vLLM's 'Maximum concurrency' line differs from kvplan's largest concurrency, or None
    when the two say the same (kvplan's is vLLM's, rounded down to whole requests)."""
    if not plan.fits:
        return None
    vllm = plan.max_concurrency
    reasons = []
    if ctx_tokens != plan.max_model_len:
        reasons.append(
            f"vLLM's line is for requests of max_model_len {plan.max_model_len:,}, kvplan's for --ctx {ctx_tokens:,}"
        )
    for reason in (_window_reason(plan, ctx_tokens), _group_reason(plan)):
        if reason:
            reasons.append(reason)
    if prefix_tokens and kvplan_concurrency > 1:
        reasons.append(f"kvplan counts the shared {prefix_tokens:,}-token prefix once, vLLM's line does not share it")
    if len({s.layers for s in plan.stages}) > 1:
        reasons.append("pipeline stages hold different numbers of layers: vLLM takes the stage with the fewest "
                       "blocks, kvplan the stage with the most KV per request")
    if not reasons:
        if int(vllm) == kvplan_concurrency:
            return (
                None
                if vllm == int(vllm)
                else f"vLLM prints a fraction of a request ({vllm:.2f}x), kvplan whole requests"
            )
        reasons.append("block rounding")
    return f"differs from kvplan's {kvplan_concurrency:,}: " + "; ".join(reasons)
