"""--quantization takes vLLM's names (awq_marlin, gptq_marlin, compressed-tensors, modelopt, modelopt_fp4,
nvfp4, fbgemm_fp8, mxfp4, ...) and refuses, as vLLM does, one that does not match the checkpoint's."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.perf.kernel_dtypes import kernel_dtypes, partly_kept_note, unquantized_tables
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import load_gpu
from kvplan.spec.profiles import load_model

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator" / "model_configs"


def _plan(model: str, quantization: str | None, tp: int = 8):
    return plan_capacity(
        load_model(model),
        EngineArgs(gpu=load_gpu("b200"), tensor_parallel_size=tp, quantization=quantization, max_model_len=4096),
    )


@pytest.mark.parametrize("name", ["compressed-tensors", "compressed_tensors", None])
def test_the_checkpoints_own_method_is_accepted(name: str | None) -> None:
    assert _plan(str(CONFIGS / "moonshotai--Kimi-K2.5_config.json"), name).num_gpu_blocks > 0


@pytest.mark.parametrize(("model", "name", "stored"), [
    ("moonshotai--Kimi-K2.5", "gptq_marlin", "compressed-tensors"),
    ("MiniMaxAI--MiniMax-M2.5", "awq_marlin", "fp8"),
    ("MiniMaxAI--MiniMax-M2.5", "modelopt_fp4", "fp8"),
])
def test_a_method_the_checkpoint_was_not_made_with_is_refused(model: str, name: str, stored: str) -> None:
    with pytest.raises(KvplanError, match=f"checkpoint is {stored}-quantized"):
        _plan(str(CONFIGS / f"{model}_config.json"), name)


def test_unknown_name_lists_vllms_names() -> None:
    with pytest.raises(KvplanError, match="awq_marlin.*compressed-tensors.*gptq_marlin.*modelopt_fp4.*nvfp4"):
        EngineArgs(quantization="int3")


def test_kernel_tables_follow_the_scheme() -> None:
    assert kernel_dtypes(load_model(str(CONFIGS / "MiniMaxAI--MiniMax-M2.5_config.json")), None) == (
        "fp8_block",
        "fp8_block",
    )
    assert kernel_dtypes(load_model(str(CONFIGS / "openai--gpt-oss-120b_config.json")), None) == (
        "bfloat16",
        "w4a16_mxfp4",
    )
    assert kernel_dtypes(load_model(str(CONFIGS / "moonshotai--Kimi-K2.5_config.json")), None) == (
        "bfloat16",
        "int4_wo",
    )
    assert kernel_dtypes(load_model("llama-3.1-8b"), "fp8") == ("fp8", "fp8")
    assert kernel_dtypes(load_model("llama-3.1-8b"), None) == ("bfloat16", "bfloat16")


def test_layers_vllm_builds_unquantized_run_bf16_gemms() -> None:
    """The LM head and MoE gate always; NVIDIA's NVFP4 MiniMax-M2.5 lists every
    `model.layers.N.self_attn*` in its ignore list (tests/data/aiconfigurator/model_configs, as
    AIConfigurator ships it), so its q/k/v/o are bf16 GEMMs while its experts are NVFP4. GLM-5.1's
    NVFP4 keeps 96% of its attention and dense MLP weights: timed as bf16 and the rest noted. A
    runtime --quantization converts every linear layer."""
    nvfp4 = load_model(str(CONFIGS / "nvidia--MiniMax-M2.5-NVFP4_config.json"))
    assert kernel_dtypes(nvfp4, None) == ("nvfp4", "nvfp4")
    assert unquantized_tables(nvfp4, None) == ("head", "router", "attention") and partly_kept_note(nvfp4, None) is None
    glm = load_model(str(CONFIGS / "nvidia--GLM-5.1-NVFP4_config.json"))
    assert unquantized_tables(glm, None) == ("head", "router", "attention", "mlp")
    assert "96% of its attention" in (partly_kept_note(glm, None) or "")
    fp8 = load_model(str(CONFIGS / "MiniMaxAI--MiniMax-M2.5_config.json"))
    assert unquantized_tables(fp8, None) == ("head", "router")
    assert unquantized_tables(load_model("llama-3.1-8b"), "fp8") == ("head", "router")
