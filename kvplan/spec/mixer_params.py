"""Parameters of the layers that are not attention: Mamba / Mamba2 / Gated-DeltaNet mixers, and
which layers of a hybrid carry a dense MLP, a mixture of experts, or no MLP at all.

Shapes follow the Hugging Face modules (and vLLM's, which load the same checkpoints):
    mamba2  in_proj h x (2I + 2GN + H), conv1d (I + 2GN) x k (+ bias), dt_bias/A_log/D H each,
            gated norm I, out_proj I x h
    gdn     in_proj_qkvz h x (2 nk dk + 2 nv dv), in_proj_ba h x 2nv, conv1d (2 nk dk + nv dv) x k,
            dt_bias/A_log nv each, norm dv, out_proj nv dv x h
    linear  qkv_proj h x 3HD, output_gate h x HD, out_proj HD x h, norm HD (MiniMax lightning attention)
    short_conv  in_proj h x 3c, depthwise conv1d c x k, out_proj c x h (LFM2)
    mamba1  in_proj h x 2I, conv1d I x k (+ bias), x_proj I x (R + 2N), dt_proj R x I + I,
            A_log I x N, D I, out_proj I x h (Jamba adds dt/B/C layer norms R + 2N)
"""
from __future__ import annotations

from math import ceil
from typing import Any

from kvplan.spec.cache.state import RecurrentState
from kvplan.spec.families import Family, Traits


def _flag(cfg: dict[str, Any], *keys: str, default: bool = False) -> bool:
    for key in keys:
        if cfg.get(key) is not None:
            return bool(cfg[key])
    return default


def _dt_rank(cfg: dict[str, Any], hidden: int) -> int:
    rank = cfg.get("mamba_dt_rank") or cfg.get("time_step_rank") or "auto"
    return ceil(hidden / 16) if rank == "auto" else int(rank)


def state_mixer_params(cfg: dict[str, Any], state: RecurrentState, hidden: int, traits: Traits | None = None) -> int:
    """Weights of one layer's state mixer (its conv and recurrent parameters included)."""
    traits = traits or Traits()
    proj_bias = _flag(cfg, *traits.mixer_bias_keys)
    conv_bias = _flag(cfg, "mamba_conv_bias", "use_conv_bias", default=True)
    if state.mixer == "gdn":
        nv, dv = state.heads, state.head_dim
        nk_dk = (state.conv_channels - nv * dv) // 2
        in_proj = hidden * (2 * nk_dk + 2 * nv * dv) + hidden * 2 * nv
        return in_proj + state.conv_channels * state.conv_kernel + 2 * nv + dv + nv * dv * hidden
    if state.mixer == "mamba2":
        inner, heads, conv_dim = state.conv_channels, state.heads, state.conv_elements_total(1)
        in_out = hidden * (inner + conv_dim + heads) + inner * hidden
        conv = conv_dim * state.conv_kernel + (conv_dim if conv_bias else 0)
        # the gated RMSNorm over the inner width (Falcon-H1 has it only with mamba_rms_norm)
        norm = inner if traits.mamba_inner_norm is None or traits.mamba_inner_norm(cfg) else 0
        return in_out + conv + 3 * heads + norm + ((inner + conv_dim + heads + hidden) if proj_bias else 0)
    if state.mixer == "mamba1":
        inner, n, rank = state.conv_channels, state.state_size, _dt_rank(cfg, hidden)
        params = hidden * 2 * inner + inner * hidden + inner * (rank + 2 * n) + rank * inner + inner
        params += inner * state.conv_kernel + (inner if conv_bias else 0) + inner * n + inner
        if proj_bias:
            params += 2 * inner + hidden
        if traits.mamba1_dt_norms:
            params += rank + 2 * n  # dt, B and C layer norms (Jamba)
        return params
    if state.mixer == "kda":
        # Kimi-Linear KDA: q/k/v h x Hd, depthwise convs 3Hd x k, forget gate (dt_bias Hd, A_log H, f_a h x d,
        # f_b d x Hd), beta b_proj h x H, output gate (g_a h x d, g_b d x Hd), o_norm d, o_proj Hd x h
        heads, d = state.heads, state.head_dim
        inner = heads * d
        return (
            4 * hidden * inner
            + state.conv_channels * state.conv_kernel
            + inner
            + heads
            + 2 * (hidden * d + d * inner)
            + hidden * heads
            + d
        )
    if state.mixer == "short_conv":
        # LFM2 ShortConv: in_proj h x 3c (B, C, x gates), depthwise conv c x k, out_proj c x h (biases: conv_bias)
        c = state.conv_channels
        return (
            hidden * 3 * c
            + c * state.conv_kernel
            + c * hidden
            + ((3 * c + c + hidden) if _flag(cfg, "conv_bias") else 0)
        )
    # MiniMax lightning attention: qkv_proj h x 3HD, output_gate h x HD, out_proj HD x h, RMSNorm over HD
    inner = state.heads * state.head_dim
    return 5 * hidden * inner + inner


def mlp_plan(cfg: dict[str, Any], n_layers: int, family: Family) -> list[str] | None:
    """Per layer "dense", "moe" or "none": the family's own layout, else the generic keys (Kimi-Linear's
    `mlp_layer_types`, ERNIE-4.5's `moe_layer_start_index`); None: the caller's default (every layer MoE
    or dense by `decoder_sparse_step` / `mlp_only_layers`)."""
    if family.mlp_plan is not None:
        plan = family.mlp_plan(cfg, n_layers)
        if plan is not None:
            return plan
    if isinstance(cfg.get("mlp_layer_types"), list) and len(cfg["mlp_layer_types"]) == n_layers:
        return ["moe" if t == "sparse" else "dense" for t in cfg["mlp_layer_types"]]  # Kimi-Linear (transformers 5)
    if cfg.get("moe_layer_start_index") is not None:  # ERNIE-4.5: experts from start to end, every interval-th layer
        start, interval = int(cfg["moe_layer_start_index"]), int(cfg.get("moe_layer_interval") or 1)
        end = int(cfg["moe_layer_end_index"]) if cfg.get("moe_layer_end_index") is not None else n_layers - 1
        return ["moe" if start <= i <= end and (i + 1) % interval == 0 else "dense" for i in range(n_layers)]
    return None
