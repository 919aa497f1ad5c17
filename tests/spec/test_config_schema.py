"""The edge schemas: config.json (spec/config_schema.py), result request records and calibration
files accept every real file and refuse garbage with one line naming the field path and the value;
the schemas keep up with the dataclasses they guard (a field added to one must reach the other)."""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from kvplan.errors import ConfigError
from kvplan.spec.config_schema import check_config
from kvplan.spec.model import spec_from_config

ROOT = Path(__file__).resolve().parents[2]


def _real_configs() -> list[tuple[str, dict]]:
    out = [
        (str(p.relative_to(ROOT)), json.loads(p.read_text()))
        for p in sorted((ROOT / "tests" / "data").rglob("config.json"))
    ]
    out += [(str(p.relative_to(ROOT)), yaml.safe_load(p.read_text())["config"])
            for p in sorted((ROOT / "profiles").glob("*.yaml"))]
    return out


def test_every_real_config_passes_the_schema() -> None:
    configs = _real_configs()
    assert len(configs) > 100
    for where, config in configs:
        check_config(config, where)


BAD = [
    ({"architectures": -1}, "architectures: must be a list, got -1"),
    ({"head_dim": 0}, "head_dim: must be a whole number in 1..65,536, got 0"),
    ({"head_dim": -128}, "head_dim: must be a whole number in 1..65,536, got -128"),
    ({"head_dim": 1.5}, "head_dim: must be a whole number in 1..65,536, got 1.5"),
    ({"head_dim": True}, "head_dim: must be a whole number in 1..65,536, got True"),
    ({"vocab_size": -5}, "vocab_size: must be a whole number"),
    ({"max_position_embeddings": 2**70}, "max_position_embeddings: must be a whole number"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers: must be a whole number"),
    ({"text_config": {"num_key_value_heads": float("nan")}}, "text_config.num_key_value_heads: must be a whole number"),
    ({"text_config": [1]}, "text_config: must be a mapping"),
    ({"intermediate_size": [1024, -1]}, "intermediate_size[1]: must be a whole number"),
    ({"layer_types": "full_attention"}, "layer_types: must be a list"),
    ({"layer_types": [1, 2]}, "layer_types[0]: must be a string"),
    ({"mlp_only_layers": [0, "x"]}, "mlp_only_layers[1]: must be a whole number"),
    ({"hybrid_override_pattern": 7}, "hybrid_override_pattern: must be a string"),
    ({"mamba_expand": float("inf")}, "mamba_expand: must be a finite number"),
    ({"time_step_rank": "big"}, "time_step_rank: must be a whole number"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings: must be true or false"),
    ({"quantization_config": "gptq"}, "quantization_config: must be a mapping"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 0}}, "quantization_config.bits: must be a whole number"),
    ({"quantization_config": {"config_groups": {"g": {"weights": {"num_bits": "4"}}}}},
     "quantization_config.config_groups.g.weights.num_bits"),
    ({"vision_config": {"image_size": -1}}, "vision_config.image_size: must be a whole number"),
    ({"rope_scaling": 3}, "rope_scaling: must be a mapping"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": -4}}, "rope_scaling.factor: must be a finite number"),
]


@pytest.mark.parametrize("change,needle", BAD, ids=[n.split(":")[0] for _, n in BAD])
def test_garbage_is_one_line_naming_field_and_value(change: dict, needle: str) -> None:
    from kvplan.spec.profiles import model_profile

    config = {**model_profile("tiny-llama")["config"], **change}
    with pytest.raises(ConfigError) as info:
        spec_from_config(config, "x", where="m/config.json")
    message = str(info.value)
    assert message.startswith("m/config.json: ") and needle in message and "\n" not in message and len(message) < 400


def test_unread_keys_pass_untouched() -> None:
    from kvplan.spec.profiles import model_profile

    config = {**model_profile("tiny-llama")["config"], "some_new_key": [{"x": float("nan")}], "head_dim": 16.0}
    assert spec_from_config(config, "x").head_dim == 16  # 16.0 is a whole number, as transformers reads it


def test_request_schema_matches_request_record() -> None:
    """The result-file schema of a request has exactly RequestRecord's fields."""
    from kvplan.results.record import RequestRecord
    from kvplan.results.result_checks import _Request

    assert set(_Request.model_fields) == {f.name for f in fields(RequestRecord)}


def test_calibration_schema_matches_the_cost_model(tmp_path: Path) -> None:
    """Every field LinearCostModel stores is one the calibration schema reads, and a saved fit loads back."""
    from kvplan.stress.cpu_cost import LinearCostModel, _calibration_schema

    assert set(_calibration_schema().model_fields) - {"kind"} == {f.name for f in fields(LinearCostModel)}
    fit = LinearCostModel(
        0.004,
        1e-5,
        1e-4,
        1e-8,
        1e-11,
        model="m",
        num_samples=10,
        r2=0.95,
        reference_kernel_ms=1.5,
        cpu_wait_share=0.1,
        threads=2,
        machine={"cpu_model": "x", "cores": 2, "torch": "2.13", "host": "h"},
    )
    fit.save(tmp_path / "c.yaml")
    assert LinearCostModel.load(tmp_path / "c.yaml") == fit


@pytest.mark.parametrize("scenario,needle", [({"workload": 3}, "scenario.workload: must be a mapping"),
                                             ({"workload": {"classes": [1]}}, "scenario.workload.classes[0]"),
                                             ({"engine": [1]}, "scenario.engine: must be a mapping"),
                                             ({"model": 5}, "scenario.model: must be a model name")])
def test_a_results_scenario_copy_has_mapping_sections(tmp_path: Path, scenario: dict, needle: str) -> None:
    """Reports read the result's copy of its scenario section by section (the fuzz suite found
    `workload: 3` reaching the HTML report as an AttributeError)."""
    from kvplan.errors import KvplanError
    from kvplan.results.result import load_result

    data = json.loads((ROOT / "kvplan" / "data" / "baselines" / "ci-smoke.json").read_text())
    data["scenario"].update(scenario)
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(KvplanError) as info:
        load_result(tmp_path / "r.json")
    assert needle in str(info.value)


@pytest.mark.parametrize("tokens", [float("inf"), float("nan"), 1e300, 12.5, -3])
def test_a_token_count_out_of_range_is_a_scenario_error(tokens: float) -> None:
    from kvplan.errors import KvplanError
    from kvplan.stress.scenario_loader import load_scenario, parse_scenario

    data = load_scenario("ci-smoke").to_dict()
    data["workload"]["classes"][0]["prompt_tokens"] = tokens  # was OverflowError for inf
    with pytest.raises(KvplanError, match=r"prompt_tokens: must be a whole number of tokens"):
        parse_scenario(data, "s.yaml")


def test_request_schema_requires_what_request_record_requires() -> None:
    """A field RequestRecord needs (no default) is required by the schema too: a result whose
    request lacks `finish_s` is one line, not a TypeError in the report (found by the fuzz suite)."""
    from dataclasses import MISSING

    from kvplan.results.record import RequestRecord
    from kvplan.results.result_checks import _Request

    needed = {f.name for f in fields(RequestRecord) if f.default is MISSING and f.default_factory is MISSING}
    assert {name for name, f in _Request.model_fields.items() if f.is_required()} == needed


@pytest.mark.parametrize("missing", ["qk_nope_head_dim", "v_head_dim", "qk_rope_head_dim"])
def test_mla_needs_its_three_head_dims(missing: str) -> None:
    """An MLA config (kv_lora_rank) without one of its head dims is one line (was a KeyError)."""
    from kvplan.spec.profiles import model_profile

    config = json.loads(json.dumps(model_profile("deepseek-v2-lite")["config"]))
    (config.get("text_config") or config).pop(missing)
    with pytest.raises(ConfigError, match=f"missing required field '{missing}'"):
        spec_from_config(config, "x", where="m/config.json")


def test_rope_scaling_factor_null_is_no_scaling(tmp_path: Path, capsys) -> None:
    """`"factor": null` in a YaRN rope_scaling plans as factor 1 (was a TypeError in the budget)."""
    from kvplan.cli import main
    from kvplan.spec.profiles import model_profile

    config = {**model_profile("tiny-llama")["config"],
              "rope_scaling": {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 1024}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit) as info:
        main(["estimate", "-m", str(tmp_path), "--gpu", "h100"])
    assert info.value.code == 0, capsys.readouterr().err
