"""`ParamCount`: exact parameter counts from a config, split by where the weights live.

The split matters for memory: quantized checkpoints keep embeddings, norms and often the LM
head in 16-bit; MoE models activate only `experts_per_tok` experts per token; TP splits the
linear layers but replicates the norms. These are the generic decoder's rules; a family's
`Traits` switch its biases, norms and MLP shape, and a family may count itself (`Family.counts`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kvplan.spec.families import GENERIC, Family, Traits
from kvplan.spec.layers import indexer_layers
from kvplan.spec.mixer_params import mlp_plan, state_mixer_params

if TYPE_CHECKING:
    from kvplan.spec.layer import Layer


@dataclass(frozen=True)
class ParamCount:
    embedding: int  # input token (and learned position) embeddings
    lm_head: int  # 0 when tied to the embedding
    attention: int  # q/k/v/o projections (+ biases, sinks, MLA down/up projections)
    mlp_dense: int  # dense MLPs, shared experts and routers
    experts: int  # all routed experts
    experts_active: int  # routed experts used by one token
    norms: int  # layer norms (replicated under TP)
    mixer: int = 0  # Mamba / Gated-DeltaNet mixers of the state layers (not attention)
    encoder: int = 0  # vision tower + projector of a multimodal model (kvplan.spec.encoder_params)

    @property
    def total(self) -> int:
        return self.decoder + self.encoder

    @property
    def decoder(self) -> int:
        """The text decoder alone (what text-only parameter counts publish)."""
        return self.embedding + self.lm_head + self.attention + self.mixer + self.mlp_dense + self.experts + self.norms

    @property
    def active(self) -> int:
        """Parameters touched by one token (input embedding included, as published active counts do)."""
        return self.total - self.experts + self.experts_active

    @property
    def linear(self) -> int:
        """Weights that weight-quantization schemes convert (decoder linear layers)."""
        return self.attention + self.mixer + self.mlp_dense + self.experts


def moe_shape(cfg: dict[str, Any]) -> tuple[int, int, int, int]:
    """(routed experts, experts per token, expert intermediate size, shared experts)."""
    n = (cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
         or cfg.get("moe_num_experts") or 0)
    k = (cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or cfg.get("moe_topk")
         or cfg.get("num_experts_per_token") or cfg.get("moe_k") or 0)
    inter = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0
    shared = cfg.get("n_shared_experts") or cfg.get("num_shared_experts") or cfg.get("moe_num_shared_experts") or 0
    return int(n), int(k), int(inter if not isinstance(inter, list) else max(inter)), int(shared)


def _lfm2_ff_width(cfg: dict[str, Any], inter: int) -> int:
    """LFM2's MLP width (vLLM lfm2.py Lfm2MLP): 2/3 of intermediate_size, times block_ffn_dim_multiplier,
    rounded up to block_multiple_of."""
    width = int(2 * inter / 3)
    if cfg.get("block_ffn_dim_multiplier") is not None:
        width = int(float(cfg["block_ffn_dim_multiplier"]) * width)
    multiple = int(cfg.get("block_multiple_of") or 256)
    return multiple * ((width + multiple - 1) // multiple)


def _indexer_params(cfg: dict[str, Any], hidden: int) -> int:
    """DeepSeek-V3.2's sparse-attention indexer (index_topk set): wq_b q_lora_rank x n d, wk h x d,
    a LayerNorm over d (weight and bias), weights_proj h x n (n: index_n_heads, d: index_head_dim)."""
    if cfg.get("index_topk") is None:
        return 0
    n, d = int(cfg.get("index_n_heads") or 64), int(cfg.get("index_head_dim") or 128)
    q_rank = int(cfg.get("q_lora_rank") or hidden)
    return q_rank * n * d + hidden * d + 2 * d + hidden * n


def attention_params(cfg: dict[str, Any], hidden: int, n_heads: int, kv_heads: int, head_dim: int,
                     traits: Traits | None = None) -> int:
    """One attention layer: q/k/v/o (MLA: its down/up projections and the sparse indexer), with the
    biases, norms, output gate and sinks the family's traits say."""
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3, Kimi)
        rope, nope = int(cfg["qk_rope_head_dim"]), int(cfg["qk_nope_head_dim"])
        v_dim, kv_rank, q_rank = int(cfg["v_head_dim"]), int(cfg["kv_lora_rank"]), cfg.get("q_lora_rank")
        q = hidden * q_rank + q_rank + q_rank * n_heads * (nope + rope) if q_rank else hidden * n_heads * (nope + rope)
        kv = hidden * (kv_rank + rope) + kv_rank + kv_rank * n_heads * (nope + v_dim)
        return q + kv + n_heads * v_dim * hidden + _indexer_params(cfg, hidden)
    traits = traits or Traits()
    q_out, kv_out = n_heads * head_dim, kv_heads * head_dim
    params = hidden * (q_out + 2 * kv_out) + q_out * hidden
    if (traits.gated_attention and cfg.get("attn_output_gate") is not False) or cfg.get("attn_output_gate"):
        params += hidden * q_out  # gated attention: q_proj also emits the output gate
    biased = bool(cfg.get("attention_bias") or cfg.get("bias"))
    if traits.qkv_bias or biased:
        params += q_out + 2 * kv_out
    if traits.o_bias or biased:
        params += hidden  # output projection bias
    if traits.qk_norm_full_width:
        if cfg.get("use_qk_norm", True):
            params += q_out + kv_out  # q/k norms over all heads at once (MiniMax-M2, qk_norm_type per_layer)
    elif traits.qk_norm or cfg.get("use_qk_norm"):
        params += 2 * head_dim  # per-head q/k RMSNorms (GLM-4.5 with use_qk_norm)
    if traits.attention_sinks:
        params += n_heads
    return params


def _expert_params(hidden: int, exp_inter: int, traits: Traits) -> int:
    expert = (3 if traits.gated_experts else 2) * hidden * exp_inter
    if traits.expert_bias:
        expert += 2 * exp_inter + hidden  # gate_up and down biases
    return expert


def _mlp_params(cfg: dict[str, Any], family: Family, n_layers: int, hidden: int,
                dense_mlp: int) -> tuple[int, int, int]:
    """(dense MLPs + shared experts + routers, all routed experts, routed experts one token uses)."""
    traits = family.traits
    n_exp, k_exp, exp_inter, n_shared = moe_shape(cfg)
    plan = mlp_plan(cfg, n_layers, family)
    if plan is None:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        only_dense = set(cfg.get("mlp_only_layers") or [])
        step = int(cfg.get("decoder_sparse_step") or 1)
        plan = ["dense" if not n_exp or i < first_dense or i in only_dense or (i + 1) % step else "moe"
                for i in range(n_layers)]
    # a latent MoE (Nemotron-3, vLLM nemotron_h.py `moe_latent_size`): the routed experts work in a
    # narrower latent space, entered and left through one hidden x latent projection each per layer
    # (Kimi-K3 names the routed experts' width `routed_expert_hidden_size`)
    latent = int(cfg.get("moe_latent_size") or cfg.get("routed_expert_hidden_size") or 0)
    expert = _expert_params(latent or hidden, exp_inter, traits)
    latent_proj = 2 * hidden * latent
    # a router bias, or DeepSeek-V3's (noaux_tc) per-expert score-correction bias
    biased = traits.router_bias or cfg.get("topk_method") == "noaux_tc"
    router = hidden * n_exp + (n_exp if biased else 0)
    shared_inter = cfg.get("shared_expert_intermediate_size") or cfg.get("moe_shared_expert_intermediate_size")
    own_width = traits.own_shared_width and shared_inter
    shared = n_shared * (_expert_params(hidden, int(shared_inter or 0), traits) if own_width else expert)
    if cfg.get("share_expert_dim"):  # Step-3.x: the shared expert's own width
        shared = n_shared * _expert_params(hidden, int(cfg["share_expert_dim"]), traits)
    elif latent and not cfg.get("moe_latent_size"):
        shared = n_shared * _expert_params(hidden, exp_inter, traits)  # Kimi-K3: shared experts at the hidden width
    # a shared MLP beside the experts, no gate (Granite MoE's shared_mlp: input_linear h x 2s, output_linear s x h)
    side_mlp = 3 * hidden * int(cfg.get(traits.shared_mlp_key) or 0) if traits.shared_mlp_key else 0
    mlp_dense = experts = experts_active = 0
    for kind in plan:
        if kind == "dense":
            mlp_dense += dense_mlp
        elif kind == "moe" and n_exp:
            experts += n_exp * expert
            experts_active += k_exp * expert
            mlp_dense += router + shared + latent_proj + side_mlp
            if shared_inter and not traits.own_shared_width:  # Qwen2-MoE / Qwen3-Next: one gated shared expert
                mlp_dense += 3 * hidden * int(shared_inter) + hidden
    return mlp_dense, experts, experts_active


def _norms_per_layer(cfg: dict[str, Any], traits: Traits, layers: tuple[Layer, ...], plan: list[str] | None) -> int:
    if any(layer.state is not None for layer in layers) or plan is not None:
        if traits.one_norm_per_block:
            return 1  # one block = one mixer or one MLP (Nemotron-H MLP/MoE layers are their own blocks)
        return 2 if plan is None or "none" not in plan else 1  # before the mixer, before an MLP if any
    n = traits.norms_per_layer
    return n(cfg) if callable(n) else n


def count_params(cfg: dict[str, Any], family: Family = GENERIC, *, layers: tuple[Layer, ...], hidden: int,
                 n_heads: int, kv_heads: int, head_dim: int, intermediate: int, vocab: int,
                 encoder: int = 0) -> ParamCount:
    """Parameters by where they live; attention only in the layers that attend, state mixers apart."""
    n_layers, traits = len(layers), family.traits
    if family.counts is not None:
        counts = family.counts(cfg, n_layers, hidden, n_heads, head_dim, vocab, "config.json")
        return ParamCount(**counts, encoder=encoder)
    embedding = vocab * hidden + (traits.positions(cfg) * hidden if traits.positions else 0)
    tied = cfg.get("tie_word_embeddings")
    tied = traits.tied_by_default if tied is None else bool(tied)
    lm_head = 0 if tied else vocab * hidden + (vocab if traits.lm_head_bias else 0)

    attending = sum(1 for layer in layers if layer.attends)
    attention = attending * attention_params(cfg, hidden, n_heads, kv_heads, head_dim, traits) if attending else 0
    if cfg.get("indexer_types") is not None and attending:  # indexers on some layers only (GLM-5.2)
        without = attending - sum(indexer_layers(cfg, n_layers, "config.json"))
        attention -= without * _indexer_params(cfg, hidden)
    mixer = sum(state_mixer_params(cfg, layer.state, hidden, traits) for layer in layers if layer.state is not None)
    norm = 2 * hidden if traits.layernorm_bias else hidden
    norms = n_layers * _norms_per_layer(cfg, traits, layers, mlp_plan(cfg, n_layers, family)) * norm + norm

    dense_inter = int(cfg.get(traits.dense_intermediate_key) or intermediate) if traits.dense_intermediate_key \
        else intermediate
    if cfg.get("block_auto_adjust_ff_dim"):
        dense_inter = _lfm2_ff_width(cfg, dense_inter)
    dense_mlp = (3 if traits.gated_mlp else 2) * hidden * dense_inter + traits.extra_per_layer_mlp
    dense_mlp += (dense_inter + hidden) if traits.mlp_bias else 0
    mlp_dense, experts, experts_active = _mlp_params(cfg, family, n_layers, hidden, dense_mlp)
    widths = cfg.get("intermediate_size")
    if isinstance(widths, list) and len(widths) == n_layers and not moe_shape(cfg)[0]:
        mlp_dense = sum((3 if traits.gated_mlp else 2) * hidden * int(w) for w in widths)  # Gemma-3n: a width per layer
    counts = asdict(ParamCount(embedding, lm_head, attention, mlp_dense, experts, experts_active, norms, mixer))
    if family.extra_params is not None:
        counts = family.extra_params(cfg, counts, hidden=hidden, n_heads=n_heads, head_dim=head_dim,
                                     attending=attending, n_layers=n_layers)
    return ParamCount(**{**counts, "encoder": encoder})
