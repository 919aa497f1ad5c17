"""Decoders the generic rules describe with no rule of their own: a Llama-shaped layout read from the
config's keys (GQA, MLA latents, DeepSeek-V3.2's sparse indexer, sliding windows, MoE steps, shared
experts, per-layer `layer_types` are all key-driven). Listed here because they were checked: their
transformers modules built on the meta device match kvplan's parameter count within 1% and K/V widths
exactly (tests/data/transformers_crosscheck.json), or, for the text towers of multimodal checkpoints and
models transformers cannot build small, by hand against published checkpoints and vLLM start-up logs.
Any model type in no family module is planned the same way, with a warning that it was not checked."""
from __future__ import annotations

from kvplan.spec.families.family import Family

FAMILIES = (
    Family(
        frozenset({
            "aria_text", "axk1", "bitnet", "cohere", "cohere2_moe", "cwm", "deepseek_v2", "deepseek_v3",
            "deepseek_v32", "diffllama", "dots3_note_text", "emu3_text_model", "exaone", "exaone4", "exaone_moe",
            "flint", "glm4_moe", "glm4_moe_lite", "glm_moe_dsa", "helium", "hunyuan_v1_dense", "hy_v3",
            "hyperclovax", "internlm3", "iquestcoder", "kolibri1", "laguna", "lara_mini", "mellum", "minicpm3",
            "minicpm5_moe", "ministral", "ministral3", "mllama_text_model", "olmo", "olmo3", "olmoe", "openai-gpt",
            "param2moe", "phimoe", "qwen4_exp_text", "sarvam_mla", "sarvam_moe", "seed_oss", "solar_open",
            "stablelm", "vaultgemma", "youtu",
        }),
        "vllm/model_executor/models/llama.py",
        checked="transformers",
    ),
    Family(
        frozenset({
            "glm4v_moe_text", "kimi_k2", "kimi_vl", "mimo", "qwen2_5_omni_text", "qwen2_5_vl_text", "qwen2_vl_text",
            "qwen3_omni_moe_text", "qwen3_vl_moe_text", "qwen3_vl_text", "step3p7",
        }),
        "vllm/model_executor/models/llama.py",
        checked="hand",
    ),
)
