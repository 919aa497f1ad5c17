"""A walk of the estimate and stress paths decides each setting once: `--kv-cache-dtype` is turned
into the dtype a model caches in one place (`ModelSpec.kv_dtype`, the scenario's
`kv_cache_dtype_name`), `--dtype` into the dtype it is served in in one (`ModelSpec.served_dtype`),
and every later ask of the same setting reads that answer, however many layers, groups and what-ifs
ask. Two deciders (or a decider per layer) could answer differently."""
from __future__ import annotations

from collections import Counter

import pytest

import kvplan.spec.model as model_module
import kvplan.stress.scenario as scenario_module
from kvplan.cli import main
from kvplan.errors import KvplanError
from kvplan.stress.scenario_loader import load_scenario


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Each time a model decides a KV dtype: (the model instance, the setting, the model dtype)."""
    seen: Counter = Counter()
    decide = model_module.ModelSpec._decide_kv_dtype

    def counted(spec, kv_cache_dtype, model_dtype):
        seen[(id(spec), kv_cache_dtype, model_dtype)] += 1
        return decide(spec, kv_cache_dtype, model_dtype)

    monkeypatch.setattr(model_module.ModelSpec, "_decide_kv_dtype", counted)
    return seen


@pytest.fixture
def dtype_decisions(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Each time a model decides the dtype `--dtype` serves it in: (the model instance, the setting)."""
    seen: Counter = Counter()
    decide = model_module.ModelSpec._decide_served_dtype

    def counted(spec, dtype):
        seen[(id(spec), dtype)] += 1
        return decide(spec, dtype)

    monkeypatch.setattr(model_module.ModelSpec, "_decide_served_dtype", counted)
    return seen


def test_an_estimate_decides_the_served_dtype_once_per_model(dtype_decisions: Counter) -> None:
    with pytest.raises(SystemExit):
        main(["estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8", "--gpu", "h100",
              "--dtype", "bf16"])
    # the weights, activations, RoPE cache, KV sizing and every what-if ask it
    assert {setting for _, setting in dtype_decisions} == {"bf16"}
    assert max(dtype_decisions.values()) == 1, dtype_decisions


def test_served_dtype_auto_is_the_checkpoint_dtype_and_aliases_are_normalized() -> None:
    from kvplan.spec.profiles import load_model

    spec = load_model("llama-2-7b")  # its config.json: "torch_dtype": "float16"
    assert spec.served_dtype("auto") == spec.served_dtype(None) == "float16"
    assert spec.served_dtype("bf16") == "bfloat16"
    with pytest.raises(KvplanError, match="unknown dtype 'fp7'"):
        spec.served_dtype("fp7")


def test_an_estimate_decides_each_kv_setting_once_per_model(decisions: Counter) -> None:
    with pytest.raises(SystemExit):
        main(["estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8", "--gpu", "h100"])
    # asked as given (auto), as served (float16), and the fp8 / int4 what-ifs: 32 layers, several
    # groups and budgets ask each of them many times
    assert {(setting, dtype) for _, setting, dtype in decisions} >= {("auto", "float16"), ("fp8", "float16")}
    assert max(decisions.values()) == 1, decisions


def test_without_a_gpu_the_catalog_walk_still_decides_once(decisions: Counter) -> None:
    with pytest.raises(SystemExit):
        main(["estimate", "--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8"])
    assert decisions and max(decisions.values()) == 1, decisions


def test_a_scenario_decides_its_kv_dtype_once(decisions: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    resolved: list[tuple] = []
    resolve = scenario_module.resolve_kv_dtype
    monkeypatch.setattr(scenario_module, "resolve_kv_dtype", lambda *a, **k: resolved.append(a) or resolve(*a, **k))
    scenario = load_scenario("ci-smoke")
    for _ in range(3):  # the stress run's prediction, memory check and report each ask
        scenario.bytes_per_block()
        scenario.num_gpu_blocks()
        scenario.kv_cache_dtype_name()
    assert len(resolved) == 1
    assert max(decisions.values()) == 1, decisions
