"""vLLM V1's multimodal profile run in the activation term (issue 12): the dummy encoder batch,
hand-counted from the configs and vLLM's rules, and the item counts real start-up logs print.

Rules: vllm/v1/core/encoder_cache_manager.py (`compute_mm_encoder_budget`: B = max(max_num_batched_tokens,
T)), vllm/v1/worker/utils.py (`MultiModalBudget.get_max_items`), vllm/v1/worker/gpu_model_runner.py
(`profile_run`: the encoder outputs stay cached during the decoder's dummy forward), and per family
gemma3_mm.py + siglip.py, pixtral.py, qwen2_5_vl.py, qwen3_vl.py, kimi_vl.py.
"""
from __future__ import annotations

import pytest

from kvplan.plan import overheads as oh
from kvplan.plan.budget import plan_capacity
from kvplan.plan.encoder_profile import encoder_profile
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import custom_gpu
from kvplan.spec.profiles import load_model


def _profile(model: str, *, tp: int = 1, mnbt: int = 8192, mns: int = 1024, mml: int = 8192, limits=None):
    spec = load_model(model)
    return encoder_profile(spec.config, text_hidden=spec.hidden_size, dtype_bytes=2, tp=tp, max_num_batched_tokens=mnbt,
                           max_num_seqs=mns, max_model_len=mml, limits=limits)


def test_gemma3_siglip_batch_hand_counted() -> None:
    """Gemma-3-27B: one 896 px crop = (896 / 14)^2 = 4,096 SigLIP patches pooled to 256 tokens; the
    placeholder "\\n\\n<start_of_image>" + 256 + "<end_of_image>\\n\\n" is 260 tokens, so an 8,192-token
    budget profiles 8192 // 260 = 31 images. SigLIP (h 1,152, MLP 4,304, GELU) is TP-sharded."""
    e = _profile("gemma-3-27b-it")
    assert (e.family, e.modality, e.tokens_per_item, e.patches_per_item, e.items) == ("siglip", "image", 260, 4096, 31)
    pixels, attention, mlp = 3 * 14 * 14, 2 * 1152 + 4 * 1152, 3 * 1152 + 2 * 4304
    assert e.forward_peak_bytes == 31 * 4096 * (pixels + max(attention, mlp)) * 2
    assert e.cache_bytes == 31 * 260 * 5376 * 2  # outputs in the text hidden size (5,376), bf16
    tp4 = _profile("gemma-3-27b-it", tp=4)
    assert tp4.forward_peak_bytes == 31 * 4096 * (pixels + max(2 * 1152 + 1152, 3 * 1152 + 2 * 4304 // 4)) * 2


def test_pixtral_profiles_two_images_as_a_logged_ministral_run() -> None:
    """Pixtral (Mistral-Small-3.1): 1,540 px / 14 = 110^2 = 12,100 patches, merged 2x2 into a 55 x 55
    grid plus a break token per row: T = 55 x 56 = 3,080. An L40S Ministral-3-8B log (same Pixtral
    rules) says "Encoder cache will be initialized with a budget of 8192 tokens, and profiled with 2
    image items of the maximum feature size."; 8192 // 3080 = 2."""
    e = _profile("mistral-small-3.1-24b-instruct-2503")
    assert (e.tokens_per_item, e.patches_per_item, e.items) == (3080, 12100, 2)
    inter = load_model("mistral-small-3.1-24b-instruct-2503").config["vision_config"]["intermediate_size"]
    assert e.forward_peak_bytes == 2 * 12100 * (3 * 14 * 14 + max(6 * 1024, 3 * 1024 + 3 * inter)) * 2  # gated MLP


def test_qwen25_vl_image_or_the_longest_video() -> None:
    """Qwen2.5-VL: max_pixels 12,845,056 = 3,584^2 -> 256^2 = 65,536 patches, 16,384 tokens (2x2 merge).
    From max_model_len 32,768 a 4-frame video (2 temporal slices, 32,768 tokens) has more tokens and
    is profiled instead; --limit-mm-per-prompt video=0 keeps the image."""
    e = _profile("qwen2.5-vl-7b-instruct")
    assert (e.modality, e.tokens_per_item, e.patches_per_item, e.items) == ("image", 16384, 65536, 1)
    video = _profile("qwen2.5-vl-7b-instruct", mml=32768)
    assert (video.modality, video.tokens_per_item, video.patches_per_item, video.items) == ("video", 32768, 131072, 1)
    assert _profile("qwen2.5-vl-7b-instruct", mml=32768, limits={"video": 0}).modality == "image"
    assert _profile("qwen2.5-vl-7b-instruct", limits={"image": 0, "video": 0}) is None


@pytest.mark.parametrize(("mnbt", "items"), [(2048, 1), (16384, 1), (65536, 4)])
def test_qwen3_vl_items_as_logged(mnbt: int, items: int) -> None:
    """Qwen3-VL towers (Qwen3.5/3.6 too): 4,096 px / 16 = 256^2 patches, T 16,384. Two logs of
    Qwen3.6-35B-A3B: "a budget of 16384 tokens, and profiled with 1 image items" and, at
    max_num_batched_tokens 65,536, "a budget of 65536 tokens, and profiled with 4 image items"."""
    e = _profile("qwen3.5-35b-a3b", mnbt=mnbt, mml=65536)
    assert (e.tokens_per_item, e.patches_per_item, e.items) == (16384, 65536, items)
    assert max(mnbt, 16384) // e.tokens_per_item == items


def test_moonvit_is_replicated_across_tp() -> None:
    """Kimi-VL: the 1,024 px dummy exceeds in_token_limit 4,096 patches, is scaled to 897 px and padded
    to 924 (66 patches a side), merged 2x2: T 33^2 = 1,089. vLLM does not shard MoonViT, so TP
    leaves its peak as it is."""
    e = _profile("kimi-vl-a3b-instruct")
    assert (e.tokens_per_item, e.patches_per_item, e.items) == (1089, 4356, 8192 // 1089)
    assert _profile("kimi-vl-a3b-instruct", tp=4).forward_peak_bytes == e.forward_peak_bytes


def test_limits_and_max_num_seqs_cap_the_items() -> None:
    """items = max(1, min(B // T, max_num_seqs x max(1, min(limit, max_model_len // T))))."""
    assert _profile("gemma-3-27b-it", mns=2, limits={"image": 1}).items == 2
    assert _profile("gemma-3-27b-it", mns=2, limits={"image": 5}).items == 10
    assert _profile("glm-4.5v") is None  # a tower kvplan does not model: no term, and the plan says so


def test_the_profile_run_peak_and_a_logged_image_on_off_pair() -> None:
    """The activation is max(encoder forward, encoder outputs + decoder forward). A public deployment
    write-up of RedHatAI/Qwen3.6-35B-A3B-NVFP4 on one RTX 5090 (vLLM nightly 8936118, --max-model-len
    131072, vision tower kept bf16: model_visual.safetensors 853 MiB) logged "Available KV cache
    memory" 4.88 GiB with images and 6.44 GiB with --limit-mm-per-prompt image=0,video=0: 1.56 GiB,
    the tower's weights plus its profile batch. kvplan's Qwen3.5-35B-A3B profile has the same tower
    (counted: 852 MiB) and, at that card's defaults (256 sequences, 2,048 batched tokens), puts the
    difference in exactly those two terms; the figures are in the README (one pair: not a test bound)."""
    spec = load_model("qwen3.5-35b-a3b")
    args = EngineArgs(
        gpu=custom_gpu(80.0), vllm_version="0.20.0", max_num_seqs=256, max_num_batched_tokens=2048, max_model_len=131072
    )
    full = plan_capacity(spec, args)
    text = plan_capacity(spec.without_encoder(), args)
    assert round(spec.params.encoder * 2 / 2**20) == 852
    e = _profile("qwen3.5-35b-a3b", mnbt=2048, mns=256, mml=131072)
    decoder = oh.activation_bytes(spec, dtype="auto", max_num_batched_tokens=2048, max_num_seqs=256,
                                  version=oh.parse_vllm_version("0.20.0"))
    assert full.activation_bytes == max(decoder + e.cache_bytes, oh.ACTIVATION_C0_BYTES + e.forward_peak_bytes)
    assert text.activation_bytes == decoder < full.activation_bytes
    delta = text.available_kv_cache_bytes - full.available_kv_cache_bytes
    assert delta == spec.params.encoder * 2 + full.activation_bytes - decoder
    # V0 (before 0.8) is not modelled: no encoder term, the plan says so
    old = plan_capacity(spec, EngineArgs(gpu=custom_gpu(80.0), vllm_version="0.6.4", max_model_len=8192))
    assert any("encoder profiling is not modelled" in w for w in old.warnings)
    assert any("profiles the vision encoder on 1 image item(s)" in w for w in full.warnings)


def test_skip_mm_profiling_and_language_model_only_flags(capsys) -> None:
    """vLLM's --skip-mm-profiling keeps the tower's weights but runs no dummy batch (kvplan warns: images
    can then run out of memory); --language-model-only loads no tower, as image=0,video=0."""
    import json

    from kvplan.cli import main

    def run(*flags: str) -> dict:
        with pytest.raises(SystemExit) as info:
            main(["estimate", "--model", "qwen3.5-35b-a3b", "--gpu-memory-gib", "80", "--max-num-seqs", "256",
                  "--max-num-batched-tokens", "2048", "--max-model-len", "8192", "--json", *flags])
        assert info.value.code == 0
        out, err = capsys.readouterr()
        return {**json.loads(out), "stderr": err}

    full, skip, lm_only, limits = run(), run("--skip-mm-profiling"), run("--language-model-only"), \
        run("--limit-mm-per-prompt", "image=0,video=0")
    assert (
        full["encoder_profile"]["items"] == 1 and skip["encoder_profile"] is None and lm_only["encoder_profile"] is None
    )
    assert skip["weights_bytes_per_gpu"] == full["weights_bytes_per_gpu"] > lm_only["weights_bytes_per_gpu"]
    assert skip["activation_bytes"] == lm_only["activation_bytes"] < full["activation_bytes"]
    assert any("--skip-mm-profiling" in w for w in skip["vllm_warnings"])
    assert any("profiles the vision encoder on 1 image item(s)" in w for w in full["vllm_warnings"])
    assert {k: v for k, v in lm_only.items() if k != "stderr"} == {k: v for k, v in limits.items() if k != "stderr"}


def test_max_pixels_bounds_the_qwen_image_as_a_logged_run(capsys) -> None:
    """A Qwen3-VL-8B run with --mm-processor-kwargs '{"max_pixels": 1003520}', --max-num-seqs 5,
    --limit-mm-per-prompt image=1, max_model_len 4096 logged "a budget of 8192 tokens, and profiled
    with 5 image items" (an offline LLM: 8,192 batched tokens): smart_resize keeps floor(sqrt(1003520) / 32) = 31 merged
    cells a side, so
    T = 31^2 = 961 and items = min(8192 // 961, 5 x 1) = 5."""
    import json

    from kvplan.cli import main

    e = _profile("qwen3-vl-8b-instruct", mns=5, mml=4096, limits={"image": 1})
    assert e.items == 1
    spec = load_model("qwen3-vl-8b-instruct")
    small = encoder_profile(spec.config, text_hidden=spec.hidden_size, dtype_bytes=2, tp=1, max_num_batched_tokens=8192,
                            max_num_seqs=5, max_model_len=4096, limits={"image": 1}, max_pixels=1003520)
    assert (small.tokens_per_item, small.patches_per_item, small.items) == (961, 62 * 62, 5)
    with pytest.raises(SystemExit) as info:
        main(
            [
                "estimate",
                "--model",
                "qwen3-vl-8b-instruct",
                "--gpu-memory-gib",
                "47.5",
                "--max-model-len",
                "4096",
                "--max-num-seqs",
                "5",
                "--max-num-batched-tokens",
                "8192",
                "--limit-mm-per-prompt",
                '{"image": 1}',
                "--mm-processor-kwargs",
                '{"max_pixels": 1003520, "min_pixels": 784}',
                "--json",
            ]
        )
    out, err = capsys.readouterr()
    assert info.value.code == 0 and json.loads(out)["encoder_profile"]["items"] == 5
    assert "min_pixels: not modelled" in err
    for bad in ("[1]", '{"max_pixels": -5}', "{"):
        with pytest.raises(SystemExit) as info:
            main(["estimate", "--model", "qwen3-vl-8b-instruct", "--gpu", "h100", "--mm-processor-kwargs", bad])
        _, err = capsys.readouterr()
        assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "--mm-processor-kwargs" in err
