"""Profiles of widely deployed models added from real config.json copies (tests/data/reference/hf-configs,
provenance in each folder's SOURCE.md): KV bytes per token counted by hand with vLLM's rules, and every
profile plans on a GPU (exit 0, or exit 2 with one line).

vLLM files the rules come from:
- vllm/v1/kv_cache_interface.py: AttentionSpec.page_size_bytes = 2 (K, V) x block x kv heads x head size x
  dtype bytes (FullAttentionSpec); MLAAttentionSpec: one latent (kv_lora_rank + qk_rope_head_dim) per token, no V
- vllm/model_executor/models/qwen3_vl.py: the text tower's layers carry the cache, the ViT none
"""
from __future__ import annotations

import json

import pytest

from kvplan.cli import main
from kvplan.plan.kv import KvLayout
from kvplan.spec.model import spec_from_config
from kvplan.spec.profiles import load_model

NEW_PROFILES = [
    "deepseek-v3.2",
    "kimi-k2-instruct",
    "minimax-m2.5",
    "qwen3-vl-8b-instruct",
    "qwen3-vl-30b-a3b-instruct",
    "qwen2.5-vl-7b-instruct",
    "glm-4.5v",
    "gemma-4-26b-a4b",
]


def _config(reference_dir, folder: str) -> dict:
    return json.loads((reference_dir / "hf-configs" / folder / "config.json").read_text())


def test_kimi_k2_mla_latent_per_token(reference_dir):
    """Kimi-K2 (DeepseekV3ForCausalLM): 61 MLA layers x (512 + 64) x 2 B (bf16 cache; MLAAttentionSpec)."""
    spec = spec_from_config(_config(reference_dir, "moonshotai--Kimi-K2-Instruct"), "kimi-k2")
    assert spec.attention_kinds == {"mla": 61}
    assert KvLayout.of(spec).bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert KvLayout.of(spec, tp=8).bytes_per_token_per_gpu() == 70_272  # latent replicated per rank
    assert 1.0e12 < spec.params.total < 1.05e12  # Moonshot: "1 trillion total parameters"
    assert spec.quant.method == "fp8"


def test_minimax_m2_full_gqa(reference_dir):
    """MiniMax-M2.5: 62 full-attention layers, 8 KV heads x head_dim 128 (FullAttentionSpec), 256 experts."""
    spec = spec_from_config(_config(reference_dir, "MiniMaxAI--MiniMax-M2.5"), "minimax")
    assert spec.attention_kinds == {"full": 62}
    assert KvLayout.of(spec).bytes_per_token() == 2 * 62 * 8 * 128 * 2 == 253_952
    assert KvLayout.of(spec, tp=8).bytes_per_token_per_gpu() == 2 * 62 * 1 * 128 * 2
    assert 2.2e11 < spec.params.total < 2.35e11  # MiniMax: 230B total


@pytest.mark.parametrize(("folder", "layers", "kv_heads"), [("Qwen--Qwen3-VL-8B-Instruct", 36, 8),
                                                            ("Qwen--Qwen3-VL-30B-A3B-Instruct", 48, 4)])
def test_qwen3_vl_text_tower_caches(reference_dir, folder, layers, kv_heads):
    """Qwen3-VL: text_config geometry (explicit head_dim 128); the vision tower caches nothing."""
    spec = spec_from_config(_config(reference_dir, folder), "qwen3-vl")
    assert spec.attention_kinds == {"full": layers}
    assert KvLayout.of(spec).bytes_per_token() == 2 * layers * kv_heads * 128 * 2


def test_qwen2_5_vl_sliding_window_off(reference_dir):
    """Qwen2.5-VL-7B: sliding_window 32768 but use_sliding_window false -> every layer full (vLLM qwen2_5_vl.py
    builds Qwen2 decoder layers, whose sliding window applies only with use_sliding_window)."""
    spec = spec_from_config(_config(reference_dir, "Qwen--Qwen2.5-VL-7B-Instruct"), "qwen2.5-vl")
    assert spec.attention_kinds == {"full": 28}
    assert KvLayout.of(spec).bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 57_344


def test_glm_4_5v_text_tower(reference_dir):
    """GLM-4.5V (glm4v_moe): text_config 46 layers x 8 KV heads x head_dim 128 (FullAttentionSpec); the
    partial_rotary_factor changes RoPE, not the cache."""
    spec = spec_from_config(_config(reference_dir, "zai-org--GLM-4.5V"), "glm-4.5v")
    assert spec.attention_kinds == {"full": 46}
    assert KvLayout.of(spec).bytes_per_token() == 2 * 46 * 8 * 128 * 2 == 188_416
    assert 1.05e11 < spec.params.total < 1.09e11  # GLM-4.5-Air text tower: 106B total


@pytest.mark.parametrize("name", NEW_PROFILES)
def test_new_profiles_show_and_plan(capsys, name):
    assert load_model(name).name == name
    for args in (["profiles", "show", name], ["estimate", "--model", name, "--gpu", "h100", "--json"]):
        with pytest.raises(SystemExit) as info:
            main(args)
        out, err = capsys.readouterr()
        assert info.value.code in (0, 2), (args, err[-2000:])
        assert "Traceback" not in err
        if info.value.code == 2:
            assert len(err.strip().splitlines()) == 1, err


# --- DeepSeek-V3.2: fp8_ds_mla and the sparse-attention indexer cache ------------------------------
def test_deepseek_v32_fp8_ds_mla_and_indexer_by_hand(reference_dir):
    """DeepSeek-V3.2 (index_topk set). vLLM's rules:
    - vllm/model_executor/models/config.py DeepseekV32ForCausalLM.verify_and_update_config: --kv-cache-dtype
      auto or fp8* becomes "fp8_ds_mla"; bfloat16 stays a 16-bit cache;
    - vllm/v1/kv_cache_interface.py MLAAttentionSpec (and flashmla_sparse.py get_kv_cache_shape): fp8_ds_mla pages
      are block_size x 656 B (512 fp8 latent + 4 fp32 scales + 64 bf16 RoPE);
    - vllm/model_executor/models/deepseek_v2.py Indexer: DeepseekV32IndexerCache of head_dim
      index_head_dim + index_head_dim // 128 x 4 = 132 uint8 per token and layer, whatever the KV dtype;
    - vllm/platforms/cuda.py: block size forced to 64 for FlashMLASparse."""
    spec = spec_from_config(_config(reference_dir, "deepseek-ai--DeepSeek-V3.2"), "v3.2")
    assert spec.has_sparse_indexer and spec.attention_kinds == {"mla": 61}
    auto = KvLayout.of(spec)
    assert auto.kv_dtype.name == "fp8_ds_mla" and auto.block_size == 64
    assert auto.bytes_per_token() == 61 * (656 + 132) == 48_068
    assert KvLayout.of(spec, "fp8").bytes_per_token() == 48_068  # every fp8 name is fp8_ds_mla here
    bf16 = KvLayout.of(spec, "bfloat16")
    assert bf16.bytes_per_token() == 61 * ((512 + 64) * 2 + 132) == 78_324
    tp8 = KvLayout.of(spec, tp=8)
    assert tp8.bytes_per_block() == 64 * 48_068  # latent and indexer replicated on every rank
    assert tp8.request_bytes_per_gpu(1000) == 16 * 64 * 48_068  # 1,000 tokens: 16 blocks of 64


def test_deepseek_v32_pool_from_kv_bytes():
    from kvplan.plan.budget import plan_capacity
    from kvplan.plan.engine_args import EngineArgs

    spec = load_model("deepseek-v3.2")
    plan = plan_capacity(
        spec, EngineArgs(kv_cache_memory_bytes=40 * 2**30, tensor_parallel_size=8, max_model_len=32_768)
    )
    assert plan.block_size_tokens == 64
    assert plan.num_gpu_blocks == 40 * 2**30 // (64 * 48_068)


def test_fp8_ds_mla_is_refused_for_other_models(capsys):
    from kvplan.errors import KvplanError

    with pytest.raises(KvplanError, match="fp8_ds_mla"):
        KvLayout.of(load_model("kimi-k2-instruct"), "fp8_ds_mla")  # dense MLA: no sparse indexer
    assert KvLayout.of(load_model("kimi-k2-instruct"), "fp8").bytes_per_token() == 61 * 576  # plain fp8 latent
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "qwen3-8b", "--kv-cache-dtype", "fp8_ds_mla"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "fp8_ds_mla" in err
