"""Qwen2.5-Omni / Qwen3-Omni: vLLM serves the thinker (Qwen2_5OmniThinkerForConditionalGeneration), so
the plan reads thinker_config.text_config for KV and says which towers it cannot count."""
from __future__ import annotations

import pytest

from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.kv import KvLayout
from kvplan.spec.model import spec_from_config


def test_qwen2_5_omni_thinker_text_decoder_caches():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("qwen2_5_omni").to_dict()
    text = cfg["thinker_config"]["text_config"]
    spec = spec_from_config(cfg, "qwen2.5-omni")
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    n = text["num_hidden_layers"]
    assert spec.attention_kinds == {"full": n}
    assert KvLayout.of(spec).bytes_per_token() == 2 * n * text["num_key_value_heads"] * head_dim * 2
    plan = plan_capacity(spec, EngineArgs(kv_cache_memory_bytes=2**33, max_model_len=8192))
    assert any("audio tower (audio_config) is not counted" in w for w in plan.warnings)


def test_qwen3_omni_vision_encoder_is_the_qwen3_vl_tower():
    """Qwen3-Omni's thinker vision encoder has Qwen3-VL's blocks, merger and deepstack mergers: the count
    is exact against transformers' Qwen3OmniMoeVisionEncoder (meta device)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    omni = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
    from kvplan.spec.encoder_params import encoder_family, encoder_params

    cfg = transformers.AutoConfig.for_model("qwen3_omni_moe")
    vision = cfg.thinker_config.vision_config
    with torch.device("meta"):
        expected = sum(p.numel() for p in omni.Qwen3OmniMoeVisionEncoder(vision).parameters())
    thinker = {"model_type": "qwen3_omni_moe_thinker", "vision_config": vision.to_dict()}
    assert encoder_family(thinker) == "qwen3_vl"
    assert encoder_params(thinker, cfg.thinker_config.text_config.hidden_size) == expected
