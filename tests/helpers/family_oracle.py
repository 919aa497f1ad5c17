"""Oracles for the family tests: transformers' own modules built on the meta device (their parameter
count and K/V projection widths, tests/helpers/crosscheck_transformers.py), and small configs whose
kvplan spec a test compares with a count worked by hand."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvplan.spec.model import ModelSpec, spec_from_config


def against_transformers(model_type: str) -> dict[str, Any]:
    """kvplan's count of a small config of `model_type` relative to transformers' module (0.0: equal)."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from crosscheck_transformers import check

    transformers.logging.set_verbosity_error()
    result = check(model_type)
    if "skip" in result:
        pytest.skip(f"{model_type}: {result['skip']}")
    return result


def assert_exact(model_type: str) -> None:
    r = against_transformers(model_type)
    assert r["params"] == 0.0 and r["kv_layers_off"] == 0, r


def assert_within(model_type: str, tolerance: float) -> None:
    r = against_transformers(model_type)
    assert abs(r["params"]) <= tolerance and r["kv_layers_off"] == 0, r


SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
         "intermediate_size": 96, "vocab_size": 320, "max_position_embeddings": 4096}


CONFIGS = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "model_configs"


def published(name: str) -> ModelSpec:
    """The spec of a verbatim Hub config.json copied in tests/data (AIConfigurator's model_configs)."""
    return spec_from_config(json.loads((CONFIGS / f"{name}_config.json").read_text()), name)


def spec(model_type: str, **keys: Any) -> ModelSpec:
    """A small config of `model_type` with `keys` over SMALL (None drops a key)."""
    cfg = {**SMALL, "model_type": model_type, **keys}
    return spec_from_config({k: v for k, v in cfg.items() if v is not None}, model_type)


# tiny multimodal configs whose Hugging Face modules (meta device) are the oracle of a tower's count
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




def tower_vs_transformers(model_type: str) -> tuple[int, int]:
    """(kvplan's count of the tiny `model_type` config's tower and projector, the Hugging Face modules')."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from kvplan.spec.encoder_params import encoder_is_exact, encoder_params

    cfg = transformers.AutoConfig.for_model(model_type, **TINY[model_type])
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = transformers.AutoModelForImageTextToText.from_config(cfg)
    expected = sum(p.numel() for n, p in model.named_parameters()
                   if "vision_tower" in n or ".visual." in n or "vision_model" in n or "multi_modal_projector" in n)
    assert expected > 0 and encoder_is_exact(cfg.to_dict())
    return encoder_params(cfg.to_dict(), _TEXT["hidden_size"]), expected
