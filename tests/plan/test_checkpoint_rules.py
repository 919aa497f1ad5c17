"""What a checkpoint decides and vLLM enforces: the length when a config names none, and runtime
`--quantization` only where vLLM applies it at load."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.errors import KvplanError
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import load_gpu
from kvplan.spec.model import spec_from_config
from kvplan.spec.profiles import load_model

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "model_configs"


def _config(name: str, drop: str) -> dict:
    config = json.loads((CONFIGS / f"{name}_config.json").read_text())
    config.pop(drop)
    return config


def test_a_missing_length_takes_the_class_default() -> None:
    """transformers fills Qwen3Config's max_position_embeddings=32768 when config.json has none."""
    spec = spec_from_config(_config("Qwen--Qwen3-8B", "max_position_embeddings"), "qwen3")
    assert spec.max_position_embeddings == 32768 and spec.max_len_known and spec.warnings == ()


def test_no_length_at_all_accepts_the_users(tmp_path: Path, capsys) -> None:
    """No length key and no class default: vLLM's 2,048, a warning, and a longer --max-model-len
    accepted (vLLM takes it when the config names none) instead of refused."""
    config = _config("XiaomiMiMo--MiMo-7B-Base", "max_position_embeddings")
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = load_model(str(tmp_path))
    assert spec.max_position_embeddings == 2048 and not spec.max_len_known
    assert any("no maximum length" in w for w in spec.warnings)
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", str(tmp_path), "--max-model-len", "8192", "--json"])
    out, err = capsys.readouterr()
    assert info.value.code == 0 and json.loads(out)["max_model_len"] == 8192 and "no maximum length" in err


def test_runtime_quantization_only_where_vllm_applies_it() -> None:
    spec, gpu = load_model("llama-3.1-8b"), load_gpu("h100")
    with pytest.raises(KvplanError, match="needs a checkpoint quantized with it"):
        plan_capacity(spec, EngineArgs(gpu=gpu, quantization="awq"))
    fp8 = plan_capacity(spec, EngineArgs(gpu=gpu, quantization="fp8"))
    assert fp8.weights_bytes < 0.6 * plan_capacity(spec, EngineArgs(gpu=gpu)).weights_bytes
    assert plan_capacity(
        load_model("zephyr-7b-beta-awq"), EngineArgs(gpu=gpu, quantization="awq")
    ).fits  # its own scheme


def test_runtime_quantization_is_what_the_json_reports(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--quantization", "fp8", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["weight_quantization"] == "fp8" and data["weights_bytes"] < 0.6 * 2 * data["num_parameters"]
