"""The model types whose layout and parameter count kvplan has checked. Any other `model_type`
(that no family module owns) is planned as a generic decoder from its config keys, and the plan says
so in a warning: a new architecture whose config reads like a Llama is not planned silently.

CROSS_CHECKED: the text model types whose transformers modules (built on the meta device from a small
config) have kvplan's parameter count within 1% and its K/V widths on every attention layer; the
record is tests/data/transformers_crosscheck.json (tests/spec/crosscheck_transformers.py rewrites it,
tests/spec/test_transformers_crosscheck.py keeps the two in agreement).
HAND_CHECKED: checked by hand counts of published checkpoints, vLLM start-up logs or tests against
transformers outside that sweep (multimodal text towers, models transformers cannot build small).
"""
from __future__ import annotations

CROSS_CHECKED = frozenset({
    "apertus", "apertus1p5_text", "arcee", "aria_text", "axk1", "bamba", "bitnet", "bloom", "codegen",
    "cohere", "cohere2", "cohere2_moe", "cwm", "deepseek_v2", "deepseek_v3", "deepseek_v32", "diffllama",
    "dots3_note_text", "emu3_text_model", "ernie4_5", "ernie4_5_moe", "exaone", "exaone4", "exaone_moe",
    "falcon_h1", "falcon_mamba", "flint", "gemma", "gemma2", "gemma3_text", "gemma4_text", "glm4_moe",
    "glm4_moe_lite", "glm_moe_dsa", "gpt2", "gpt_neox", "gpt_oss", "gptj", "granite", "granite_swa",
    "granitemoe", "granitemoe_swa", "granitemoehybrid", "granitemoeshared", "helium", "hunyuan_v1_dense",
    "hy_v3", "hyperclovax", "internlm3", "iquestcoder", "jais2", "jamba", "kolibri1", "laguna", "lara_mini",
    "lfm2", "llama", "llama4_text", "longcat_flash", "mamba", "mellum", "minicpm3", "minicpm5_moe", "minimax",
    "minimax_m2", "ministral", "ministral3", "mistral", "mixtral", "mllama_text_model", "nanochat",
    "nemotron", "nemotron_h", "olmo", "olmo2", "olmo3", "olmoe", "openai-gpt", "opt", "param2moe",
    "persimmon", "phi", "phimoe", "qwen2", "qwen2_moe", "qwen3", "qwen3_5_moe_text", "qwen3_5_text",
    "qwen3_moe", "qwen3_next", "qwen4_exp_text", "sarvam_mla", "sarvam_moe", "seed_oss", "solar_open",
    "stablelm", "starcoder2", "vaultgemma", "youtu"
})
HAND_CHECKED = frozenset({
    "falcon", "gemma3n", "gemma3n_text", "glm4v_moe_text", "kimi_k2", "kimi_linear", "kimi_vl", "lfm2_moe",
    "mamba2", "mimo", "phi3", "qwen2_5_omni_text", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_vl",
    "qwen2_vl_text", "qwen3_omni_moe_text", "qwen3_vl_moe_text", "qwen3_vl_text", "step3p7", "zamba2"
})
CHECKED_MODEL_TYPES = CROSS_CHECKED | HAND_CHECKED


def unchecked_type_warning(model_type: str) -> str | None:
    if model_type in CHECKED_MODEL_TYPES:
        return None
    return (f"model_type {model_type!r} is not one kvplan has checked; planned as a generic decoder from its config "
            "keys, so an architecture-specific layer (a gate, a bias, a different MLP) would be missed")
