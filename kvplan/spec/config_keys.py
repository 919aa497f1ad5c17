"""Know what you do not know: every key of a config.json is either read by kvplan (the schema's
fields, or a family rule), or known not to change the layout, the weights or the KV cache; any other
key is named in a warning that says the plan was made as if it were absent (`--strict`: exit 2).

A new architecture's layout key (DeepSeek-V4's `compress_ratios`, Nemotron-NAS's `block_configs`,
a latent MoE's `moe_latent_size`) is therefore never planned silently as a plain decoder.
"""
from __future__ import annotations

from typing import Any

from kvplan.spec.config_schema import SCHEMA_KEYS
from kvplan.spec.families import MODEL_TYPE, family_of

# read by family rules outside the schema (tests/architecture checks each appears in kvplan's source)
READ_ELSEWHERE = frozenset(
    {
        "architectures",
        MODEL_TYPE,
        "torch_dtype",
        "dtype",
        "text_config",
        "vision_config",
        "audio_config",
        "thinker_config",
        "talker_config",
        "quantization_config",
        "rope_scaling",
        "rope_theta",
        "linear_attn_config",
        "attention_k_eq_v",
        "global_head_dim",
        "num_global_key_value_heads",
        "hidden_size_per_layer_input",
        "vocab_size_per_layer_input",
        "enable_moe_block",
        "index_topk",
        "mm_tokens_per_image",
        "multimodal_projector_bias",
        "original_max_position_embeddings",
        "qkv_bias",
        "rope_local_base_freq",
        "shared_intermediate_size",
        "spatial_merge_size",
        "use_double_wide_mlp",
        "eos_token_id",
        "indexer_types",
        "share_expert_dim",
        "routed_expert_hidden_size",
    }
)

# keys that change neither the layout, nor the weights kvplan counts, nor the KV cache
IRRELEVANT = frozenset({
    # identity, tooling, generation and training settings
    "_attn_implementation", "_name_or_path", "auto_map", "transformers_version", "tokenizer_class", "torchscript",
    "use_bfloat16", "use_cache", "cache_implementation", "return_dict", "return_dict_in_generate", "output_attentions",
    "output_hidden_states", "output_scores", "output_router_logits", "pruned_heads", "id2label", "label2id",
    "problem_type", "finetuning_task", "task_specific_params", "prefix", "is_decoder", "tf_legacy_loss",
    "tie_encoder_decoder", "chunk_size_feed_forward", "max_length", "min_length", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id", "decoder_start_token_id",
    "num_logits_to_keep", "ignore_index", "initializer_range", "init_std", "language_model_only", "is_encoder_decoder",
    # token ids and placeholders
    "bos_token_id", "pad_token_id", "sep_token_id", "audio_token_id", "boa_token_id", "boi_token_id", "boi_token_index",
    "eoa_token_id", "eoa_token_index", "eoi_token_id", "eoi_token_index", "image_token_id", "image_token_index",
    "image_start_token_id", "image_end_token_id", "image_placeholder", "video_token_id", "video_start_token_id",
    "video_end_token_id", "video_placeholder", "vision_token_id", "vision_start_token_id", "vision_end_token_id",
    "media_placeholder_token_id", "vision_soft_tokens_per_image", "vision_feature_layer", "use_unified_vision_chunk",
    # dropout, losses, routing arithmetic: no weights, no cache
    "dropout", "attention_dropout", "activation_dropout", "hidden_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop",
    "layerdrop", "summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type",
    "summary_use_proj", "aux_loss_alpha", "router_aux_loss_coef", "router_jitter_noise", "seq_aux", "scoring_func",
    "routed_scaling_factor", "norm_topk_prob", "use_grouped_topk", "n_group", "topk_group", "num_expert_group",
    "moe_renormalize", "moe_router_activation_func", "moe_router_scaling_factor", "moe_router_dtype",
    "moe_shared_expert_overlap", "use_routing_bias", "use_moe_router_bias", "ep_size", "expert_dtype",
    # activations, norms, scalings, positions: the same weights and cache
    "hidden_act", "hidden_activation", "activation_function", "mlp_hidden_act", "mamba_hidden_act",
    "projector_hidden_act", "activation_situ_beta", "activation_situ_linear_beta", "swiglu_alpha", "swiglu_limit",
    "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon", "norm_eps", "use_gemma_norm",
    "qk_norm_type", "qk_layernorm", "rope_parameters", "rope_interleave", "indexer_rope_interleave", "rotary_dim",
    "swa_rope_theta", "compress_rope_theta", "initial_context_length", "use_mrope", "alibi", "n_ctx",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "attention_value_scale",
    "logits_scaling", "embedding_multiplier", "residual_multiplier", "attention_multiplier", "pretraining_tp",
    "parallel_attn", "apply_residual_connection_post_layernorm", "do_layer_norm_before", "rescale_prenorm_residual",
    "residual_in_fp32", "use_mamba_kernels", "time_step_floor", "time_step_init_scheme", "time_step_limit",
    "time_step_max", "time_step_min", "time_step_scale", "chunk_size", "hc_eps", "hc_sinkhorn_iters",
    "add_full_attention_sink_bias", "add_swa_attention_sink_bias", "mlp_bias", "cross_attention_hidden_size",
    # multi-token prediction: vLLM loads those layers only for speculative decoding
    "num_nextn_predict_layers", "num_mtp_modules", "use_mtp", "mtp_num_hidden_layers", "mtp_transformer_layers",
    "mtp_hybrid_override_pattern", "mtp_layers_block_type", "mtp_use_dedicated_embeddings",
    "index_share_for_mtp_iteration",
})

# keys that change nothing unless set (False / 0 / empty is the plain decoder kvplan plans)
ONLY_WHEN_SET = frozenset({"add_cross_attention", "attention_output_gate", "mla_use_output_gate"})


def _plain(key: str, value: Any, d: dict[str, Any]) -> bool:
    """A value that means what kvplan already plans (so the key changes nothing here)."""
    if key in ONLY_WHEN_SET:
        return not value
    if value is None:  # transformers reads null as "not set": the class default, which kvplan plans
        return True
    if key == "output_gate_type":  # Qwen3.5/3.6 gated attention: the gate's activation, not its size
        return d.get("attn_output_gate") is not False
    if key == "moe_layer_freq":  # DeepSeek-style: every layer after first_k_dense_replace is MoE
        return value == 1
    if key == "qk_head_dim":  # MLA: the sum kvplan already uses
        return value == (d.get("qk_nope_head_dim") or 0) + (d.get("qk_rope_head_dim") or 0)
    if key == "sliding_window_size":  # Gemma 2's legacy copy of sliding_window
        return value == d.get("sliding_window")
    if key == "word_embed_proj_dim":  # OPT: project_in/out exist only when it differs from hidden_size
        return value == d.get("hidden_size")
    if key in ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern"):  # indexer_types spells it out
        return d.get("indexer_types") is not None or value is None
    if key == "use_bidirectional_attention":  # Gemma: image tokens attend both ways; same weights and cache
        return True
    return False


def unread_keys(config: dict[str, Any], text: dict[str, Any]) -> list[str]:
    """The keys of the config (top level and its text config) kvplan neither reads nor knows to be
    irrelevant, sorted."""
    family = family_of(text)
    known = SCHEMA_KEYS | READ_ELSEWHERE | IRRELEVANT | (family.read_keys if family else frozenset())
    found = set()
    for d in (config, text):
        for key, value in d.items():
            if key in known or key.startswith("_"):
                continue
            if _plain(key, value, d):
                continue
            found.add(key)
    return sorted(found)


def unread_keys_warning(config: dict[str, Any], text: dict[str, Any]) -> str | None:
    keys = unread_keys(config, text)
    if not keys:
        return None
    shown = ", ".join(keys[:12]) + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")
    return (f"config keys kvplan does not model: {shown}; they may change the layout, the weights or the KV cache, "
            "and the plan was made as if they were absent (--strict refuses such a plan)")
