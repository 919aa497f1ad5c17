"""Vision towers and projectors counted from `vision_config` (kvplan.spec.encoder_params) in the weights
vLLM loads (16-bit even when the decoder is quantized); each tower family's count is checked against the
Hugging Face modules in its own test (tests/spec/families/test_<tower>.py)."""
from __future__ import annotations

import pytest

from kvplan.spec.encoder_params import encoder_family, encoder_is_exact, encoder_params
from kvplan.spec.profiles import load_model


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
