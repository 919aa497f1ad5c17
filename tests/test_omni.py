"""Qwen2.5-Omni / Qwen3-Omni: vLLM serves the thinker (Qwen2_5OmniThinkerForConditionalGeneration), so
the plan reads thinker_config.text_config for KV and says which towers it cannot count."""
from __future__ import annotations

import pytest

from kvplan.plan.budget import EngineArgs, plan_capacity
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
