"""Model specs: the config rules calculators get wrong, checked against the reference model table
(through the `reference_dir` fixture: copies in tests/data/reference) and published configs."""
import csv
import json
import struct
from pathlib import Path

import pytest

from kvplan.errors import ConfigError, UnknownNameError
from kvplan.plan.kv import KvLayout
from kvplan.spec.model import spec_from_config, spec_from_path
from kvplan.spec.profiles import load_model, model_index, model_names


def _rows(reference_dir):
    return list(csv.DictReader(open(reference_dir / "models.csv")))


def _by_hf_id():
    out = {}
    for name in model_names():
        spec = load_model(name)
        out.setdefault((spec.hf_id or "").lower(), spec)
    return out


def test_every_reference_model_has_a_profile(reference_dir):
    profiles = _by_hf_id()
    missing = [r["hf_id"] for r in _rows(reference_dir) if r["hf_id"].lower() not in profiles]
    assert missing == []


def test_every_hf_config_has_a_profile(reference_dir):
    profiles = _by_hf_id()
    for folder in sorted((reference_dir / "hf-configs").iterdir()):
        if folder.is_dir():
            assert folder.name.replace("--", "/").lower() in profiles, folder.name


@pytest.mark.parametrize("alias", ["llama-2-7b", "llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "deepseek-v3",
                                   "gemma-3-27b", "gpt-oss-20b", "falcon-7b", "gpt2", "qwen3-0.6b",
                                   "tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"])
def test_short_aliases_resolve(alias):
    assert load_model(alias).num_layers > 0


def test_parameter_counts_match_reference(reference_dir):
    """models.csv num_parameters_computed / active_parameters_computed (checked there against
    published totals) are reproduced exactly from the configs."""
    profiles = _by_hf_id()
    for row in _rows(reference_dir):
        spec = profiles[row["hf_id"].lower()]
        # models.csv counts the text decoder (its README: "Gemma-3-27B = text decoder only")
        assert spec.params.decoder == int(row["num_parameters_computed"]), row["hf_id"]
        if row["active_parameters_computed"]:
            assert spec.params.active - spec.params.encoder == int(row["active_parameters_computed"]), row["hf_id"]


def test_kv_bytes_per_token_match_reference(reference_dir):
    """derived_kv_bytes_per_token_16bit_all_layers (no window cap) for every reference model."""
    profiles = _by_hf_id()
    for row in _rows(reference_dir):
        spec = profiles[row["hf_id"].lower()]
        assert KvLayout.of(spec, "float16").bytes_per_token() == int(
            row["derived_kv_bytes_per_token_16bit_all_layers"]
        ), row["hf_id"]


def test_explicit_head_dim_wins():
    # Qwen3-0.6B: hidden 1024 / 16 heads = 64, but its config.json sets head_dim 128
    spec = load_model("qwen3-0.6b")
    assert spec.head_dim == 128 and spec.hidden_size // spec.num_attention_heads == 64


def test_missing_kv_heads_means_mha():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}
    assert spec_from_config(cfg, "x").num_kv_heads == 4


def test_falcon_multi_query_caches_one_head():
    spec = load_model("falcon-7b")
    assert spec.num_kv_heads == 1 and spec.layers[0].num_kv_heads == 1
    cfg = dict(spec.config, num_kv_heads=71)  # one copy of the config says 71: still one cached head
    assert spec_from_config(cfg, "falcon").num_kv_heads == 1


def test_gpt2_key_names():
    spec = load_model("gpt2")
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.max_position_embeddings) == (
        12,
        768,
        12,
        1024,
    )


def test_gemma3_text_config_and_windows():
    spec = load_model("gemma-3-27b")
    assert spec.num_layers == 62
    full = [i for i, layer in enumerate(spec.layers) if layer.kind == "full"]
    assert full == list(range(5, 62, 6))  # every 6th layer is global: 5, 11, ..., 59
    assert {layer.window_tokens for layer in spec.layers if layer.kind == "sliding"} == {1024}


def test_gemma2_alternates_and_mistral_v01_slides_everywhere():
    g2 = load_model("gemma-2-9b")
    assert [ln.kind for ln in g2.layers[:4]] == ["sliding", "full", "sliding", "full"]
    m = load_model("mistral-7b")
    assert all(ln.kind == "sliding" and ln.window_tokens == 4096 for ln in m.layers)
    assert all(ln.kind == "full" for ln in load_model("mistral-7b-v0.3").layers)


def test_gpt_oss_layer_types_and_qwen_window_off():
    oss = load_model("gpt-oss-20b")
    assert [ln.kind for ln in oss.layers[:2]] == ["sliding", "full"] and oss.layers[0].window_tokens == 128
    assert oss.quant.method == "mxfp4"
    assert all(ln.kind == "full" for ln in load_model("qwen2.5-7b").layers)  # use_sliding_window: false


def test_mla_latent():
    spec = load_model("deepseek-v2-lite")
    assert spec.is_mla and spec.layers[0].head_dim_k == 576 and spec.layers[0].head_dim_v == 0


def test_quantized_checkpoint_weights_smaller():
    fp8 = load_model("qwen3-235b-a22b-fp8")
    bf16 = load_model("qwen3-235b-a22b")
    assert fp8.quant.method == "fp8"
    assert 0.5 < fp8.weights_bytes / bf16.weights_bytes < 0.52


def test_local_directory_weight_bytes(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 100, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    header = json.dumps({"a": {"dtype": "BF16", "shape": [10, 10], "data_offsets": [0, 200]},
                         "b": {"dtype": "F32", "shape": [5], "data_offsets": [200, 220]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 220)
    assert spec_from_path(tmp_path).weights_bytes == 220
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 12345}}))
    assert spec_from_path(tmp_path).weights_bytes == 12345
    assert spec_from_path(tmp_path / "config.json").num_kv_heads == 2


@pytest.mark.parametrize("missing", ["num_hidden_layers", "hidden_size", "num_attention_heads"])
def test_incomplete_config_names_the_field(missing):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}
    del cfg[missing]
    with pytest.raises(ConfigError, match=missing):
        spec_from_config(cfg, "x")


def test_unknown_model_lists_close_names():
    with pytest.raises(UnknownNameError) as err:
        load_model("llama-2-7")
    assert "llama-2-7b" in str(err.value)


def test_aliases_are_unique():
    seen = {}
    for name in model_names():
        for alias in load_model(name).aliases:
            assert alias.lower() not in seen or seen[alias.lower()] == name, alias
            seen[alias.lower()] = name
    assert len(model_index()) >= len(model_names())


@pytest.mark.parametrize(
    "name,method",
    [
        ("llama-3.1-8b-instruct-w8a8", "int8"),
        ("llama-3.1-8b-instruct-w4a16", "w4a16"),
        ("llama-2-7b-gptq", "gptq"),
        ("qwen2.5-7b-instruct-fp8-dynamic", "fp8"),
    ],
)
def test_quantized_profiles(name, method):
    spec = load_model(name)
    base = (
        load_model("llama-3.1-8b")
        if "llama-3" in name
        else load_model("llama-2-7b")
        if "llama-2" in name
        else load_model("qwen2.5-7b")
    )
    assert spec.quant.method == method
    ratio = spec.weights_bytes / (base.params.total * 2)
    assert ratio < (0.62 if method in ("int8", "fp8") else 0.4)  # embeddings and LM head stay 16-bit


def test_serve_arg_is_what_vllm_serve_takes(tmp_path):
    """`vllm serve` takes a repo id or a model directory: a profile serves as its Hub id, a local
    config.json as its directory (absolute, quoted for the shell), and a config file under another
    name (AIConfigurator's `Org--Name_config.json`) as a placeholder, never the folder it sits in."""
    assert load_model("llama-2-7b").serve_arg == "meta-llama/Llama-2-7b-hf"
    assert load_model("tiny-llama").serve_arg == "tiny-llama"  # a synthetic profile: no Hub id, no directory
    src = (
        Path(__file__).resolve().parents[1]
        / "data"
        / "aiconfigurator"
        / "model_configs"
        / "Qwen--Qwen3-32B_config.json"
    )
    loose = spec_from_path(src)
    assert (
        loose.name == "Qwen--Qwen3-32B_config" and loose.serve_arg == "<model directory of Qwen--Qwen3-32B_config.json>"
    )
    model_dir = tmp_path / "my model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(src.read_text())
    for given in (model_dir, model_dir / "config.json"):
        spec = spec_from_path(given)
        assert spec.name == "my model" and spec.serve_arg == f"'{model_dir.resolve()}'"
