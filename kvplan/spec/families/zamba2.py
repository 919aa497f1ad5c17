"""Zamba2 (`zamba2`, vLLM zamba2.py; transformers modeling_zamba2.py):

    layers      every layer runs a Mamba2 mixer; a "hybrid" layer (`layers_block_type`, or
                `hybrid_layer_ids`) also runs the shared attention block, whose weights are shared but
                whose KV cache is its own
    attention   multi-head over [hidden, original embedding]: transformers' Zamba2Config sets the head
                size to 2 x hidden / heads; vLLM passes no num_kv_heads
    mixer       I = mamba_expand x hidden, n_mamba_heads heads of I / heads, mamba_ngroups groups
                (defaults: expand 2, 8 heads, 1 group, d_state 64, d_conv 4); `add_bias_linear` biases
    shared      `num_mem_blocks` copies of attention over [hidden, embedding] (2h -> H d, o_proj H d -> h)
    blocks      and a gated MLP, cycled over the hybrid layers; each hybrid layer adds its own h x h
                `linear`, a LoRA-style adapter on the MLP's gate_up (h x r + r x 2I) and, with
                use_shared_attention_adapter, on q, k and v (2h x r + r x 2h)
"""
from __future__ import annotations

from typing import Any

from kvplan.errors import ConfigError
from kvplan.spec.cache.state import RecurrentState
from kvplan.spec.families.family import Family, Geometry, Traits
from kvplan.spec.geometry import require_int
from kvplan.spec.state import config_int, ssm_dtype


def zamba2_geometry(cfg: dict[str, Any], hidden: int, where: str) -> Geometry:
    n_heads = require_int(cfg, "num_attention_heads", where)
    if (2 * hidden) % n_heads:
        raise ConfigError(f"{where}: 2 x hidden_size={hidden} is not divisible by num_attention_heads={n_heads}")
    return Geometry(n_heads, n_heads, 2 * hidden // n_heads)


def zamba2_words(cfg: dict[str, Any], n_layers: int, where: str) -> list[str]:
    blocks = cfg.get("layers_block_type")
    if blocks is None and isinstance(cfg.get("hybrid_layer_ids"), list):
        blocks = ["hybrid" if i in set(cfg["hybrid_layer_ids"]) else "mamba" for i in range(n_layers)]
    # transformers 5 writes the Mamba layers as "linear_attention"
    if not isinstance(blocks, list) or len(blocks) != n_layers or set(blocks) - {"mamba", "linear_attention", "hybrid"}:
        raise ConfigError(f"{where}: Zamba2 needs layers_block_type: {n_layers} entries of mamba or hybrid")
    return ["full+mamba2" if b == "hybrid" else "mamba2" for b in blocks]


def zamba2_state(word: str, cfg: dict[str, Any], head_dim: int, where: str) -> RecurrentState | None:
    if not word.endswith("mamba2"):
        return None
    hidden = config_int(cfg, where, "hidden_size", "d_model")
    inner = int(float(cfg.get("mamba_expand") or 2) * hidden)
    heads = config_int(cfg, where, "n_mamba_heads", default=8)
    if inner % heads:
        raise ConfigError(f"{where}: mamba_expand x hidden_size = {inner} is not divisible by n_mamba_heads={heads}")
    return RecurrentState(
        "mamba2",
        inner,
        config_int(cfg, where, "mamba_d_conv", default=4),
        heads,
        config_int(cfg, where, "mamba_headdim", default=inner // heads),
        config_int(cfg, where, "mamba_d_state", default=64),
        groups=config_int(cfg, where, "mamba_ngroups", default=1),
        ssm_dtype=ssm_dtype(cfg, where),
    )


def shared_blocks(cfg: dict[str, Any], counts: dict[str, int], *, hidden: int, n_heads: int, head_dim: int,
                  attending: int, **_: Any) -> dict[str, int]:
    """The shared transformer blocks replace the generic attention and MLP counts (module doc)."""
    blocks, rank, inter = (int(cfg.get("num_mem_blocks") or 1), int(cfg.get("adapter_rank") or 128),
                           int(cfg["intermediate_size"]))
    bias = bool(cfg.get("add_bias_linear"))
    attention = blocks * (2 * hidden * 3 * n_heads * head_dim + n_heads * head_dim * hidden)
    if cfg.get("use_shared_attention_adapter"):
        attention += attending * 3 * (2 * hidden * rank + rank * 2 * hidden)
    mlp = blocks * (hidden * 2 * inter + inter * hidden + ((2 * inter + hidden) if bias else 0))
    mlp += attending * (hidden * hidden + hidden * rank + rank * 2 * inter)
    # input_layernorm over 2h, pre_ff_layernorm over h
    return {**counts, "attention": attention, "mlp_dense": mlp, "norms": counts["norms"] + blocks * 3 * hidden}


FAMILY = Family(
    frozenset({"zamba2"}),
    "vllm/model_executor/models/zamba2.py",
    checked="hand",
    geometry=zamba2_geometry,
    layer_words=zamba2_words,
    state=zamba2_state,
    mlp_plan=lambda cfg, n: ["none"] * n,  # its MLPs live in the shared blocks
    extra_params=shared_blocks,
    traits=Traits(mixer_bias_keys=("mamba_proj_bias", "use_bias", "add_bias_linear")),
)
