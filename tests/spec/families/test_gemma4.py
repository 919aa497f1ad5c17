"""Gemma 4 (google/gemma-4-26B-A4B, config.json copy in tests/data/reference/hf-configs): per-layer KV
geometry and weights.

vLLM gemma4.py `Gemma4DecoderLayer`: a full-attention layer takes `global_head_dim` and, with
`attention_k_eq_v`, `num_global_key_value_heads`; sliding layers keep head_dim / num_key_value_heads and
the 1,024-token window. K and V are both cached (FullAttentionSpec / SlidingWindowSpec, 2 x heads x dim).
The two page sizes differ, so vLLM unifies them by block size (kv_cache_utils.py)."""
from __future__ import annotations

import json

import pytest

from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.kv import KvLayout
from kvplan.spec.gpu import load_gpu
from kvplan.spec.model import spec_from_config


def _config(reference_dir) -> dict:
    return json.loads((reference_dir / "hf-configs" / "google--gemma-4-26B-A4B" / "config.json").read_text())


def test_gemma4_kv_per_layer_type(reference_dir):
    spec = spec_from_config(_config(reference_dir), "gemma-4-26b-a4b")
    assert spec.attention_kinds == {"sliding": 25, "full": 5}
    assert {(layer.kind, layer.num_kv_heads, layer.head_dim_k, layer.window_tokens) for layer in spec.layers} == \
        {("sliding", 8, 256, 1024), ("full", 2, 512, None)}
    assert KvLayout.of(spec).bytes_per_token() == 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2 == 225_280


def test_gemma4_pages_unified_by_block_size(reference_dir):
    """A sliding layer's 16-token page is 2 x 8 x 256 x 2 B x 16 = 128 KiB, a full layer's 64 KiB: the full
    layers get 32-token blocks so both pages are 128 KiB; 5 groups of 5 sliding layers, 1 of 5 full."""
    spec = spec_from_config(_config(reference_dir), "gemma-4-26b-a4b")
    plan = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), max_model_len=32768))
    by_kind = {g.kind: g for g in plan.groups}
    assert (by_kind["sliding"].block_size, by_kind["full"].block_size) == (16, 32)
    assert by_kind["sliding"].page_bytes == by_kind["full"].page_bytes == 131_072
    assert (by_kind["sliding"].count, by_kind["full"].count) == (5, 1)


def test_gemma4_weights_match_the_hf_modules(reference_dir):
    """Text model and vision tower + embedder against transformers' Gemma4ForConditionalGeneration on the
    meta device; kvplan adds the V slot vLLM's QKVParallelLinear allocates in each k_eq_v full layer
    (5 x 1,024 x 2,816), which the checkpoint does not store. Google: 25.2 B total, 3.8 B active."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    raw = _config(reference_dir)
    cfg = transformers.AutoConfig.for_model(
        "gemma4", **{k: v for k, v in raw.items() if k not in ("model_type", "transformers_version")}
    )
    with torch.device("meta"):
        model = transformers.Gemma4ForConditionalGeneration(cfg)
    counts = {"text": 0, "vision": 0}
    for name, param in model.named_parameters():
        counts["vision" if "vision" in name else "text"] += param.numel()
    params = spec_from_config(raw, "gemma-4-26b-a4b").params
    assert params.decoder == counts["text"] + 5 * 1024 * 2816
    assert params.encoder == counts["vision"]
    assert 25.2e9 <= counts["text"] < 25.3e9 and 3.8e9 <= params.active - params.encoder < 3.9e9


def test_gemma4_as_transformers_5_writes_it():
    """transformers 5.25 saves the full layers' geometry as `per_layer_config` overrides ({"05": {"head_dim":
    512}, ...}) instead of global_head_dim: the same layers, KV and weights (its default: 30 layers, 4 KV heads,
    every 6th full, per-layer inputs of 256)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model("gemma4_text")
    raw = cfg.to_dict()
    assert "global_head_dim" not in raw and raw["per_layer_config"]["05"]["head_dim"] == 512
    spec = spec_from_config(raw, "gemma4")
    assert {(layer.kind, layer.head_dim_k) for layer in spec.layers} == {("sliding", 256), ("full", 512)}
    assert KvLayout.of(spec).bytes_per_token() == 25 * 2 * 4 * 256 * 2 + 5 * 2 * 4 * 512 * 2
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert spec.params.total == sum(p.numel() for p in model.parameters())
