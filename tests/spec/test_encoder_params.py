"""Vision towers and projectors counted from `vision_config` (kvplan.spec.encoder_params): exact against
the Hugging Face modules of each family (tiny random configs on the meta device, no weights), and counted
in the weights vLLM loads (16-bit even when the decoder is quantized)."""
from __future__ import annotations

import pytest

from kvplan.spec.encoder_params import encoder_family, encoder_is_exact, encoder_params
from kvplan.spec.profiles import load_model

_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             head_dim=32, vocab_size=300)
TINY = {
    "gemma3": dict(
        text_config=_TEXT,
        vision_config=dict(
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=56,
            patch_size=14,
        ),
    ),
    "mistral3": dict(
        text_config=dict(_TEXT, model_type="mistral"),
        vision_config=dict(
            model_type="pixtral",
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=2,
            head_dim=24,
            image_size=56,
            patch_size=14,
        ),
    ),
    "qwen2_5_vl": dict(
        text_config={k: v for k, v in _TEXT.items() if k != "head_dim"},
        vision_config=dict(
            depth=2,
            hidden_size=48,
            intermediate_size=96,
            num_heads=2,
            out_hidden_size=64,
            patch_size=14,
            fullatt_block_indexes=[1],
        ),
    ),
    "qwen2_vl": dict(
        text_config={k: v for k, v in _TEXT.items() if k != "head_dim"},
        vision_config=dict(depth=2, embed_dim=48, hidden_size=64, mlp_ratio=4, num_heads=2, patch_size=14),
    ),
    "glm4v": dict(
        text_config={k: v for k, v in _TEXT.items() if k != "head_dim"},
        vision_config=dict(
            depth=2,
            hidden_size=48,
            intermediate_size=80,
            num_heads=2,
            out_hidden_size=64,
            patch_size=14,
            image_size=56,
            attention_bias=True,
        ),
    ),
    "internvl": dict(
        text_config={k: v for k, v in _TEXT.items() if k != "head_dim"},
        vision_config=dict(
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=[56, 56],
            patch_size=[14, 14],
            attention_bias=True,
            use_qk_norm=True,
        ),
    ),
    "mllama": dict(
        text_config=dict(
            {k: v for k, v in _TEXT.items() if k != "head_dim"},
            num_hidden_layers=3,
            cross_attention_layers=[1],
            pad_token_id=0,
        ),
        vision_config=dict(
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_global_layers=1,
            attention_heads=2,
            image_size=56,
            patch_size=14,
            max_num_tiles=2,
            supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]],
            vision_output_dim=96,
            intermediate_layers_indices=[0],
        ),
    ),
    "qwen3_vl": dict(
        text_config=_TEXT,
        vision_config=dict(
            depth=3,
            hidden_size=48,
            intermediate_size=96,
            num_heads=2,
            out_hidden_size=64,
            patch_size=16,
            num_position_embeddings=16,
            deepstack_visual_indexes=[0, 1],
        ),
    ),
    "qwen3_5": dict(
        text_config=dict(
            _TEXT,
            num_hidden_layers=4,
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        ),
        vision_config=dict(
            depth=3,
            hidden_size=48,
            intermediate_size=96,
            num_heads=2,
            out_hidden_size=64,
            patch_size=16,
            num_position_embeddings=16,
            deepstack_visual_indexes=[],
        ),
    ),
}


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_encoder_count_matches_the_hf_modules(model_type):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(model_type, **TINY[model_type])
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = transformers.AutoModelForImageTextToText.from_config(cfg)
    expected = sum(p.numel() for n, p in model.named_parameters()
                   if "vision_tower" in n or ".visual." in n or "vision_model" in n or "multi_modal_projector" in n)
    assert expected > 0
    assert encoder_is_exact(cfg.to_dict())
    assert encoder_params(cfg.to_dict(), _TEXT["hidden_size"]) == expected


@pytest.mark.parametrize(("name", "published", "digits"), [
    ("gemma-3-27b-it", 27.4e9, 0.05e9),  # Hugging Face model page: 27.4B params
    ("qwen2.5-vl-7b-instruct", 8.29e9, 0.005e9),  # Hugging Face model page: 8.29B params
])
def test_multimodal_totals_include_the_vision_tower(name, published, digits):
    spec = load_model(name)
    assert spec.params.encoder > 0 and spec.params.total == spec.params.decoder + spec.params.encoder
    assert abs(spec.params.total - published) <= digits
    assert abs(spec.params.decoder - published) > digits  # the text decoder alone misses the published figure


def test_vision_weights_are_loaded_and_stay_16_bit_under_weight_quantization():
    full, w8a8 = (
        load_model("mistral-small-3.1-24b-instruct-2503"),
        load_model("mistral-small-3.1-24b-instruct-2503-w8a8"),
    )
    assert full.weights_bytes == full.params.total * 2
    assert w8a8.params.encoder == full.params.encoder
    # the quantized checkpoint converts decoder linear layers only: the vision tower's 2 bytes are all kept
    assert w8a8.quant.weights_bytes(w8a8.params, 2) - w8a8.params.encoder * 2 == \
        w8a8.quant.weights_bytes(type(w8a8.params)(**{**w8a8.params.__dict__, "encoder": 0}), 2)


def test_text_only_configs_have_no_encoder():
    assert encoder_family(load_model("qwen3-8b").config) is None and load_model("qwen3-8b").params.encoder == 0


def test_other_towers_are_counted_approximately():
    kimi = load_model("kimi-vl-a3b-instruct")
    assert encoder_family(kimi.config) == "moonvit" and kimi.params.encoder > 0
    llava = {"model_type": "llava", "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64}}
    assert encoder_family(llava) == "generic" and not encoder_is_exact(llava) and encoder_params(llava, 128) > 0


def _estimate(capsys, *args: str) -> tuple[int, str, str]:
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "qwen2.5-vl-7b-instruct", "--json", *args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.mark.parametrize("limit", ['{"image": 0, "video": 0}', "image=0,video=0"])
def test_text_only_limits_load_no_vision_tower(capsys, limit):
    """vLLM (qwen2_5_vl.py and the other Qwen-VL models) builds no vision tower when images and videos are limited
    to 0: the weights lose the tower's bytes, and the profile run its encoder batch (the activation term)."""
    import json

    spec = load_model("qwen2.5-vl-7b-instruct")
    rc, out, _ = _estimate(capsys, "--gpu", "h100", "--limit-mm-per-prompt", limit)
    text_only = json.loads(out)
    rc_full, out_full, _ = _estimate(capsys, "--gpu", "h100", "--limit-mm-per-prompt", "image=2")
    full = json.loads(out_full)
    assert rc == rc_full == 0
    assert text_only["num_encoder_parameters"] == 0 and full["num_encoder_parameters"] == spec.params.encoder
    assert full["weights_bytes"] - text_only["weights_bytes"] == spec.params.encoder * 2
    assert full["activation_bytes"] > text_only["activation_bytes"]
    assert (
        text_only["available_kv_cache_bytes"] - full["available_kv_cache_bytes"]
        == full["weights_bytes_per_gpu"]
        - text_only["weights_bytes_per_gpu"]
        + full["activation_bytes"]
        - text_only["activation_bytes"]
    )


@pytest.mark.parametrize("bad", ["image=x", "image=-1", "{"])
def test_bad_limits_are_one_line(capsys, bad):
    rc, _, err = _estimate(capsys, "--limit-mm-per-prompt", bad)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--limit-mm-per-prompt" in err
