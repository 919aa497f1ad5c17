"""`ParamCount`: exact parameter counts from a config, split by where the weights live.

The split matters for memory: quantized checkpoints keep embeddings, norms and often the LM
head in 16-bit; MoE models activate only `experts_per_tok` experts per token; TP splits the
linear layers but replicates the norms.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvplan.spec.families import family_of
from kvplan.spec.gemma3n_params import GEMMA3N_TYPES, text_extras
from kvplan.spec.gemma4_params import GEMMA4_TYPES, text_counts
from kvplan.spec.layers import indexer_layers
from kvplan.spec.longcat_params import LONGCAT_TYPES
from kvplan.spec.longcat_params import counts as longcat_counts
from kvplan.spec.mixer_params import gated_mlp, mlp_plan, norms_per_layer, state_mixer_params

if TYPE_CHECKING:
    from kvplan.spec.layer import Layer

_GATED_MLP_FREE = {
    "gpt2",
    "falcon",
    "opt",
    "phi",
    "gpt_neox",
    "gptj",
    "bloom",
    "starcoder2",
    "gpt_bigcode",
    "apertus",
    "arcee",
    "jais2",
    "nemotron",
    "persimmon",
    "nanochat",
    "apertus1p5",
    "apertus1p5_text",
    "codegen",
}  # up/down MLPs (xIELU, ReLU^2, GELU): no gate projection
_LAYERNORM_WITH_BIAS = {
    "gpt2",
    "falcon",
    "opt",
    "phi",
    "gpt_neox",
    "gptj",
    "bloom",
    "starcoder2",
    "gpt_bigcode",
    "nemotron",
    "persimmon",
    "codegen",
}
_QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "gpt2", "opt", "phi", "gpt_neox", "bloom", "starcoder2"}
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3_text", "gemma3", "olmo2", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
            "lfm2", "lfm2_moe", "gemma3n", "gemma3n_text", "apertus"}
_FOUR_NORMS = {"gemma2", "gemma3_text", "gemma3"}
_GRANITE_SHARED_MLP = {"granitemoehybrid", "granitemoeshared"}  # shared_mlp: input_linear h x 2s, output_linear s x h


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
    n = (
        cfg.get("num_local_experts")
        or cfg.get("num_experts")
        or cfg.get("n_routed_experts")
        or cfg.get("moe_num_experts")
        or 0
    )
    k = (
        cfg.get("num_experts_per_tok")
        or cfg.get("experts_per_token")
        or cfg.get("moe_topk")
        or cfg.get("num_experts_per_token")
        or cfg.get("moe_k")
        or 0
    )
    inter = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0
    shared = cfg.get("n_shared_experts") or cfg.get("num_shared_experts") or cfg.get("moe_num_shared_experts") \
        or (1 if str(cfg.get("model_type", "")).startswith("llama4") else 0)
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


def _attention(cfg: dict[str, Any], hidden: int, n_heads: int, kv_heads: int, head_dim: int) -> int:
    mt = str(cfg.get("model_type", ""))
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3, Kimi)
        rope, nope = int(cfg["qk_rope_head_dim"]), int(cfg["qk_nope_head_dim"])
        v_dim, kv_rank, q_rank = int(cfg["v_head_dim"]), int(cfg["kv_lora_rank"]), cfg.get("q_lora_rank")
        q = hidden * q_rank + q_rank + q_rank * n_heads * (nope + rope) if q_rank else hidden * n_heads * (nope + rope)
        kv = hidden * (kv_rank + rope) + kv_rank + kv_rank * n_heads * (nope + v_dim)
        return q + kv + n_heads * v_dim * hidden + _indexer_params(cfg, hidden)
    q_out, kv_out = n_heads * head_dim, kv_heads * head_dim
    params = hidden * (q_out + 2 * kv_out) + q_out * hidden
    gated_types = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
    if (mt in gated_types and cfg.get("attn_output_gate") is not False) or cfg.get("attn_output_gate"):
        params += hidden * q_out  # gated attention: q_proj also emits the output gate
    if mt in _QKV_BIAS or cfg.get("attention_bias") or cfg.get("bias"):
        params += q_out + 2 * kv_out
    if mt in ("gpt2", "opt", "phi", "gpt_neox", "bloom", "starcoder2") or cfg.get("attention_bias") or cfg.get("bias"):
        params += hidden  # output projection bias
    if mt in _QK_NORM or (cfg.get("use_qk_norm") and mt != "minimax_m2"):
        params += 2 * head_dim  # per-head q/k RMSNorms (GLM-4.5 with use_qk_norm)
    elif mt == "minimax_m2" and cfg.get("use_qk_norm", True):
        params += q_out + kv_out  # MiniMax-M2: q/k norms over all heads at once (qk_norm_type per_layer)
    if mt == "gpt_oss":
        params += n_heads  # attention sinks
    return params


def _expert_params(cfg: dict[str, Any], hidden: int, exp_inter: int) -> int:
    mt = str(cfg.get("model_type", ""))
    expert = (3 if gated_mlp(mt) else 2) * hidden * exp_inter
    if mt == "gpt_oss":
        expert += 2 * exp_inter + hidden  # gate_up and down biases
    return expert


def _mlp_params(cfg: dict[str, Any], n_layers: int, hidden: int, dense_mlp: int) -> tuple[int, int, int]:
    """(dense MLPs + shared experts + routers, all routed experts, routed experts one token uses)."""
    mt = str(cfg.get("model_type", ""))
    n_exp, k_exp, exp_inter, n_shared = moe_shape(cfg)
    plan = mlp_plan(cfg, n_layers)
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
    expert = _expert_params(cfg, latent or hidden, exp_inter)
    latent_proj = 2 * hidden * latent
    # gpt-oss router bias; DeepSeek-V3 / Nemotron-H (noaux_tc) keep a per-expert score-correction bias
    biased = mt in ("gpt_oss", "nemotron_h", "ernie4_5_moe") or cfg.get("topk_method") == "noaux_tc"
    router = hidden * n_exp + (n_exp if biased else 0)  # + a per-expert score-correction bias
    shared_inter = cfg.get("shared_expert_intermediate_size") or cfg.get("moe_shared_expert_intermediate_size")
    shared = n_shared * (
        _expert_params(cfg, hidden, int(shared_inter)) if mt == "nemotron_h" and shared_inter else expert
    )
    if cfg.get("share_expert_dim"):  # Step-3.x: the shared expert's own width
        shared = n_shared * _expert_params(cfg, hidden, int(cfg["share_expert_dim"]))
    elif latent and not cfg.get("moe_latent_size"):
        shared = n_shared * _expert_params(cfg, hidden, exp_inter)  # Kimi-K3: shared experts at the hidden width
    mlp_dense = experts = experts_active = 0
    for kind in plan:
        if kind == "dense":
            mlp_dense += dense_mlp
        elif kind == "moe" and n_exp:
            experts += n_exp * expert
            experts_active += k_exp * expert
            mlp_dense += router + shared + latent_proj
            if shared_inter and mt != "nemotron_h":  # Qwen2-MoE / Qwen3-Next: one shared expert with its own gate
                mlp_dense += 3 * hidden * int(shared_inter) + hidden
            if mt in _GRANITE_SHARED_MLP and cfg.get("shared_intermediate_size"):
                mlp_dense += 3 * hidden * int(cfg["shared_intermediate_size"])  # beside the experts, no gate
    return mlp_dense, experts, experts_active


def _zamba2_shared(
    cfg: dict[str, Any], hidden: int, n_heads: int, head_dim: int, n_hybrid: int
) -> tuple[int, int, int]:
    """Zamba2's shared transformer blocks (transformers modeling_zamba2.py; vLLM zamba2.py loads the same):
    `num_mem_blocks` copies of attention over [hidden, embedding] (2h -> H d, o_proj H d -> h, multi-head) and a
    gated MLP, cycled over the hybrid layers; each hybrid layer adds its own h x h `linear`, a LoRA-style adapter
    on the MLP's gate_up (h x r + r x 2I) and, with use_shared_attention_adapter, on q, k and v (2h x r + r x 2h).
    Returns (attention, MLP, norms)."""
    blocks, rank, inter = (
        int(cfg.get("num_mem_blocks") or 1),
        int(cfg.get("adapter_rank") or 128),
        int(cfg["intermediate_size"]),
    )
    bias = bool(cfg.get("add_bias_linear"))
    attention = blocks * (2 * hidden * 3 * n_heads * head_dim + n_heads * head_dim * hidden)
    if cfg.get("use_shared_attention_adapter"):
        attention += n_hybrid * 3 * (2 * hidden * rank + rank * 2 * hidden)
    mlp = blocks * (hidden * 2 * inter + inter * hidden + ((2 * inter + hidden) if bias else 0))
    mlp += n_hybrid * (hidden * hidden + hidden * rank + rank * 2 * inter)
    return attention, mlp, blocks * 3 * hidden  # input_layernorm over 2h, pre_ff_layernorm over h


def _norms_per_layer(cfg: dict[str, Any], layers: tuple[Layer, ...], plan: list[str] | None) -> int:
    mt = str(cfg.get("model_type", ""))
    if any(layer.state is not None for layer in layers) or plan is not None:
        return norms_per_layer(mt, has_mlp=plan is None or "none" not in plan)
    if mt in _FOUR_NORMS:
        return 4
    return 1 if mt in ("falcon", "phi") and not cfg.get("new_decoder_architecture") else 2


def count_params(cfg: dict[str, Any], *, layers: tuple[Layer, ...], hidden: int, n_heads: int,
                 kv_heads: int, head_dim: int, intermediate: int, vocab: int, encoder: int = 0) -> ParamCount:
    """Parameters by where they live; attention only in the layers that attend, state mixers apart."""
    mt = str(cfg.get("model_type", ""))
    n_layers = len(layers)
    if mt in LONGCAT_TYPES:
        mla = _attention(cfg, hidden, n_heads, kv_heads, head_dim)
        return ParamCount(**longcat_counts(cfg, n_layers, hidden, vocab, mla), encoder=encoder)
    family = family_of(cfg)
    if family is not None and family.counts is not None:
        counts = family.counts(cfg, n_layers, hidden, n_heads, head_dim, vocab, "config.json")
        return ParamCount(**counts, encoder=encoder)
    if mt in GEMMA4_TYPES:
        counts = text_counts(cfg, n_layers, hidden, n_heads, kv_heads, head_dim, intermediate, vocab)
        return ParamCount(**counts, encoder=encoder)
    embedding = vocab * hidden
    if mt == "gpt2":
        embedding += int(cfg.get("n_positions") or cfg.get("max_position_embeddings") or 1024) * hidden
    elif mt == "opt":
        embedding += (int(cfg.get("max_position_embeddings", 2048)) + 2) * hidden
    tied = cfg.get("tie_word_embeddings")
    tied = True if tied is None and mt in ("gpt2", "opt", "falcon", "mamba", "falcon_mamba") else bool(tied)
    lm_head = 0 if tied else vocab * hidden
    if mt in ("phi",):
        lm_head += vocab if not tied else 0  # lm_head bias

    attending = sum(1 for layer in layers if layer.attends)
    attention = attending * _attention(cfg, hidden, n_heads, kv_heads, head_dim) if attending else 0
    if cfg.get("indexer_types") is not None and attending:  # indexers on some layers only (GLM-5.2)
        without = attending - sum(indexer_layers(cfg, n_layers, "config.json"))
        attention -= without * _indexer_params(cfg, hidden)
    mixer = sum(state_mixer_params(cfg, layer.state, hidden) for layer in layers if layer.state is not None)
    norm = 2 * hidden if mt in _LAYERNORM_WITH_BIAS else hidden
    plan = mlp_plan(cfg, n_layers)
    norms = n_layers * _norms_per_layer(cfg, layers, plan) * norm + norm  # + final norm

    gated = mt not in _GATED_MLP_FREE and gated_mlp(mt)
    mlp_bias = mt in ("gpt2", "opt", "phi", "persimmon", "codegen")
    dense_inter = int(cfg.get("intermediate_size_mlp") or intermediate) if mt.startswith("llama4") else intermediate
    if cfg.get("block_auto_adjust_ff_dim"):
        dense_inter = _lfm2_ff_width(cfg, dense_inter)
    dense_mlp = (3 if gated else 2) * hidden * dense_inter + ((dense_inter + hidden) if mlp_bias else 0)
    if mt == "apertus":
        dense_mlp += 2  # xIELU's learned alpha_p and alpha_n
    mlp_dense, experts, experts_active = _mlp_params(cfg, n_layers, hidden, dense_mlp)
    widths = cfg.get("intermediate_size")
    if isinstance(widths, list) and len(widths) == n_layers and not moe_shape(cfg)[0]:
        mlp_dense = sum((3 if gated else 2) * hidden * int(w) for w in widths)  # Gemma-3n: a width per layer
    if mt in GEMMA3N_TYPES:
        extra_embedding, extra_linear, extra_norms = text_extras(cfg, hidden, n_layers)
        embedding, mlp_dense, norms = embedding + extra_embedding, mlp_dense + extra_linear, norms + extra_norms
    if mt == "zamba2":
        attention, mlp_dense, shared_norms = _zamba2_shared(cfg, hidden, n_heads, head_dim, attending)
        norms += shared_norms
    return ParamCount(embedding, lm_head, attention, mlp_dense, experts, experts_active, norms, mixer, encoder)
