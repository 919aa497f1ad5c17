"""Scenario schema: shipped files load; every bad scenario is one KvplanError line naming the
file, the field path and the bad value."""
from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from kvplan.engine.config import EngineConfig
from kvplan.errors import KvplanError
from kvplan.gate.tolerance import Tolerance
from kvplan.plan.kv import bytes_per_block
from kvplan.spec.profiles import load_model
from kvplan.stress.scenario import Scenario
from kvplan.stress.scenario_loader import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
BAD = Path(__file__).parent / "bad_scenarios"

BASE: dict[str, Any] = {
    "name": "base",
    "model": "tiny-llama",
    "engine": {"max_model_len": 2048, "kv_cache_dtype": "float32", "kv_cache_memory_bytes": 4 * 2**20},
    "workload": {
        "classes": [
            {
                "name": "short",
                "weight": 2,
                "prompt_tokens": {"dist": "uniform", "min": 16, "max": 256},
                "output_tokens": 32,
            },
            {
                "name": "long",
                "weight": 1,
                "prompt_tokens": {"dist": "normal", "mean": 900, "std": 100, "min": 600, "max": 1200},
                "output_tokens": {"dist": "lognormal", "mean": 100, "std": 40, "min": 8, "max": 300},
                "shared_prefix": {"id": "sys", "tokens": 256},
            },
        ]
    },
    "arrival": {"type": "poisson", "rate_per_s": 4.0},
    "num_requests": 20,
    "warmup_requests": 2,
    "seed": 1,
    "slo": {"ttft_ms": 1000, "tpot_ms": 100},
    "gate": {"exact": ["num_gpu_blocks"], "relative": {"p99_itl_ms": "+15%"}, "prediction": {"peak_kv_bytes": "2%"}},
}


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    """Set `a.b[1].c` in nested dicts/lists; value `...` deletes the key."""
    parts: list[str | int] = []
    for token in path.replace("]", "").replace("[", ".").split("."):
        parts.append(int(token) if token.isdigit() else token)
    node: Any = data
    for p in parts[:-1]:
        node = node[p]
    if value is ...:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value


def _write(tmp_path: Path, data: Any, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _error(path: Path) -> str:
    with pytest.raises(KvplanError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    return message


# (mutations, field path the message must name, bad value (or hint) it must name)
BAD_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown model", {"model": "llama-9000"}, "model", "llama-9000"),
    ("unknown model in mapping", {"model": {"name": "nope-model"}}, "model", "nope-model"),
    ("model override unknown key", {"model": {"name": "tiny-llama", "overides": {}}}, "model.overides", "overides"),
    ("wrong type name", {"name": 5}, "name", "5"),
    ("empty name", {"name": ""}, "name", "''"),
    ("negative rate", {"arrival.rate_per_s": -2.0}, "arrival.rate_per_s", "-2.0"),
    ("zero rate", {"arrival.rate_per_s": 0}, "arrival.rate_per_s", "0"),
    ("rate as string", {"arrival.rate_per_s": "fast"}, "arrival.rate_per_s", "'fast'"),
    ("unknown arrival type", {"arrival.type": "poison"}, "arrival.type", "poison"),
    ("missing rate", {"arrival.rate_per_s": ...}, "arrival.rate_per_s", "is required"),
    ("negative burstiness", {"arrival.burstiness": -1.0}, "arrival.burstiness", "-1.0"),
    (
        "burstiness on constant",
        {"arrival": {"type": "constant", "rate_per_s": 2, "burstiness": 0.5}},
        "arrival.burstiness",
        "constant",
    ),
    ("concurrency zero", {"arrival": {"type": "concurrency", "concurrency": 0}}, "arrival.concurrency", "0"),
    (
        "rate on closed loop",
        {"arrival": {"type": "concurrency", "concurrency": 4, "rate_per_s": 2}},
        "arrival.rate_per_s",
        "2",
    ),
    ("negative ramp", {"arrival.ramp_s": -5.0}, "arrival.ramp_s", "-5.0"),
    (
        "weights sum to zero",
        {"workload.classes[0].weight": 0, "workload.classes[1].weight": 0},
        "workload.classes",
        "sum to 0",
    ),
    ("negative weight", {"workload.classes[1].weight": -1}, "workload.classes[1].weight", "-1"),
    ("duplicate class names", {"workload.classes[1].name": "short"}, "workload.classes[1].name", "'short'"),
    ("no classes", {"workload.classes": []}, "workload.classes", "[]"),
    ("bad dist", {"workload.classes[0].prompt_tokens.dist": "zipf"}, "workload.classes[0].prompt_tokens.dist", "zipf"),
    (
        "normal without std",
        {"workload.classes[1].prompt_tokens.std": ...},
        "workload.classes[1].prompt_tokens.std",
        "normal",
    ),
    (
        "uniform without max",
        {"workload.classes[0].prompt_tokens.max": ...},
        "workload.classes[0].prompt_tokens.max",
        "uniform",
    ),
    ("min above max", {"workload.classes[0].prompt_tokens.min": 500}, "workload.classes[0].prompt_tokens.min", "500"),
    (
        "negative mean",
        {"workload.classes[1].prompt_tokens.mean": -900},
        "workload.classes[1].prompt_tokens.mean",
        "-900",
    ),
    (
        "mean outside range",
        {"workload.classes[1].prompt_tokens.mean": 5000},
        "workload.classes[1].prompt_tokens.mean",
        "5000",
    ),
    ("negative fixed length", {"workload.classes[0].output_tokens": -3}, "workload.classes[0].output_tokens", "-3"),
    ("fractional fixed length", {"workload.classes[0].output_tokens": 2.5}, "workload.classes[0].output_tokens", "2.5"),
    ("length as string", {"workload.classes[0].output_tokens": "lots"}, "workload.classes[0].output_tokens", "'lots'"),
    (
        "impossible fixed length",
        {"workload.classes[0].prompt_tokens": 2000, "workload.classes[0].output_tokens": 100},
        "workload.classes[0].prompt_tokens",
        "impossible length",
    ),
    (
        "impossible min length",
        {
            "workload.classes[1].prompt_tokens.min": 2045,
            "workload.classes[1].prompt_tokens.max": 2047,
            "workload.classes[1].prompt_tokens.mean": 2046,
        },
        "workload.classes[1].prompt_tokens",
        "2048",
    ),
    (
        "prefix longer than prompt",
        {"workload.classes[1].shared_prefix.tokens": 1500},
        "workload.classes[1].shared_prefix.tokens",
        "1500",
    ),
    (
        "same prefix id, different length",
        {"workload.classes[0].shared_prefix": {"id": "sys", "tokens": 8}},
        "workload.classes[1].shared_prefix.tokens",
        "8",
    ),
    ("both num_requests and duration", {"duration_s": 30.0}, "num_requests", "both"),
    ("neither num_requests nor duration", {"num_requests": ...}, "num_requests", "neither"),
    ("warmup not below num_requests", {"warmup_requests": 20}, "warmup_requests", "20"),
    ("negative warmup", {"warmup_requests": -1}, "warmup_requests", "-1"),
    ("negative seed", {"seed": -4}, "seed", "-4"),
    ("seed as float", {"seed": 1.5}, "seed", "1.5"),
    ("unknown top key", {"num_request": 3}, "num_request", "num_request"),
    ("unknown engine key", {"engine.blok_size": 16}, "engine.blok_size", "block_size"),
    ("engine bool as int", {"engine.max_num_seqs": True}, "engine.max_num_seqs", "True"),
    ("engine negative block size", {"engine.block_size": -16}, "engine.block_size", "-16"),
    ("engine string int", {"engine.max_num_seqs": "64"}, "engine.max_num_seqs", "'64'"),
    ("engine bad kv dtype", {"engine.kv_cache_dtype": "fp9"}, "engine.kv_cache_dtype", "fp9"),
    ("engine planned-only kv dtype", {"engine.kv_cache_dtype": "int4"}, "engine.kv_cache_dtype", "int4"),
    ("engine bad allocator", {"engine.allocator": "buddy"}, "engine.allocator", "buddy"),
    ("engine bad device", {"engine.device": "tpu"}, "engine.device", "tpu"),
    ("engine utilization above 1", {"engine.gpu_memory_utilization": 1.5}, "engine.gpu_memory_utilization", "1.5"),
    (
        "engine bad byte string",
        {"engine.kv_cache_memory_bytes": "lots of MiB"},
        "engine.kv_cache_memory_bytes",
        "lots of MiB",
    ),
    ("max_model_len above the model", {"engine.max_model_len": 100000}, "engine.max_model_len", "100000"),
    (
        "pool smaller than one request",
        {"engine.kv_cache_memory_bytes": "1 MiB"},
        "engine.kv_cache_memory_bytes",
        "32 blocks",
    ),
    ("slo negative", {"slo.ttft_ms": -1}, "slo.ttft_ms", "-1"),
    ("slo percentile above 100", {"slo.percentile": 101}, "slo.percentile", "101"),
    ("slo unknown key", {"slo.ttft": 100}, "slo.ttft", "ttft_ms"),
    ("gate bad percent", {"gate.relative.p99_itl_ms": "15"}, "gate.relative.p99_itl_ms", "'15'"),
    ("gate percent as number", {"gate.relative.p99_itl_ms": 15}, "gate.relative.p99_itl_ms", "15"),
    ("gate percent garbage", {"gate.relative.p99_itl_ms": "+-15%%"}, "gate.relative.p99_itl_ms", "+-15%%"),
    ("gate unknown metric", {"gate.relative": {"p99_itl": "+15%"}}, "gate.relative.p99_itl", "p99_itl_ms"),
    ("gate unknown exact figure", {"gate.exact": ["num_gpu_blocks", "peak_kv"]}, "gate.exact[1]", "peak_kv"),
    ("gate signed prediction", {"gate.prediction.peak_kv_bytes": "+2%"}, "gate.prediction.peak_kv_bytes", "+2%"),
    ("gate unknown key", {"gate.relatve": {}}, "gate.relatve", "relative"),
    ("workload not a mapping", {"workload": [1, 2]}, "workload", "[1, 2]"),
]


@pytest.mark.parametrize("mutations, path, bad", [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES])
def test_bad_scenario_names_path_and_value(tmp_path: Path, mutations: dict[str, Any], path: str, bad: str) -> None:
    data = copy.deepcopy(BASE)
    for key, value in mutations.items():
        _set(data, key, value)
    message = _error(_write(tmp_path, data))
    assert f": {path}:" in message, message
    assert bad in message, message


def test_at_least_thirty_bad_scenarios() -> None:
    assert len(BAD_CASES) + len(FILE_CASES) >= 30


FILE_CASES = [
    ("yaml_syntax_error.yaml", ":7:", "invalid YAML"),
    ("yaml_bad_indent.yaml", ":3:", "invalid YAML"),
    ("tab_indent.yaml", ":4:", "invalid YAML"),
    ("duplicate_key.yaml", ":4:", "duplicate key 'engine'"),
    ("not_a_mapping.yaml", "", "must be a mapping"),
    ("empty.yaml", "", "must be a mapping"),
    ("unknown_top_key.yaml", "num_request:", "unknown key 'num_request'"),
]


@pytest.mark.parametrize("name, where, text", FILE_CASES)
def test_bad_scenario_files(name: str, where: str, text: str) -> None:
    message = _error(BAD / name)
    assert where in message and text in message, message


def test_yaml_error_has_line_and_column() -> None:
    message = _error(BAD / "yaml_syntax_error.yaml")
    location = message.split(": invalid YAML")[0]
    line, column = location.rsplit(":", 2)[1:]
    assert line.isdigit() and column.isdigit(), message


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(KvplanError, match="nope.yaml: no such scenario file"):
        load_scenario(missing)


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert parse_scenario(scenario.to_dict()) == scenario  # the dict in result.json loads back


def test_shipped_scenario_set() -> None:
    names = {p.stem for p in (ROOT / "scenarios").glob("*.yaml")}
    assert {"mixed", "short-chat", "long-context", "shared-prefix", "paged-vs-contiguous", "ci-smoke"} <= names


def test_mixed_pool_is_several_max_len_reservations() -> None:
    s = load_scenario(ROOT / "scenarios" / "mixed.yaml")
    per_block = bytes_per_block(load_model("tiny-llama"), 16, "float32")
    assert per_block == 16 * 2048 == s.bytes_per_block()
    reservation_blocks = s.max_model_len // s.engine.block_size
    assert s.max_model_len == 4096 and s.num_gpu_blocks() == 1024
    assert 2 <= s.num_gpu_blocks() // reservation_blocks <= 6  # contiguous: a handful at a time


def test_ci_smoke_is_small() -> None:
    s = load_scenario(ROOT / "scenarios" / "ci-smoke.yaml")
    assert 24 <= s.num_requests <= 40 and s.model.name == "tiny-llama"


def test_engine_block_is_the_engine_config() -> None:
    """One engine configuration type: the scenario's engine block is an `EngineConfig`, validated
    by the same rules as `EngineConfig(...)` in Python, without importing torch."""
    data = copy.deepcopy(BASE)
    data["engine"] = {"kv_cache_memory_bytes": "32 MiB", "allocator": "contiguous"}
    s = parse_scenario(data)
    assert isinstance(s.engine, EngineConfig) and dataclasses.is_dataclass(s.engine)
    assert s.engine == EngineConfig(kv_cache_memory_bytes=32 * 2**20, allocator="contiguous")
    code = "import sys, kvplan.stress.scenario_loader; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_defaults_and_parsing() -> None:
    data = copy.deepcopy(BASE)
    data["engine"] = {"kv_cache_memory_bytes": "32 MiB"}
    data["model"] = {"name": "tiny-llama", "overrides": {"max_position_embeddings": 4096}}
    s = parse_scenario(data)
    assert s.engine.kv_cache_memory_bytes == 32 * 2**20
    assert s.max_model_len == 4096  # the override took effect
    assert s.engine.kv_cache_dtype == "auto" and s.kv_cache_dtype_name() == "float32"  # CPU runs float32
    assert s.workload.classes[0].output_tokens.dist == "fixed" and s.workload.classes[0].output_tokens.mean == 32
    assert s.arrival.gamma_shape == 1.0 and s.slo.percentile == 99
    assert s.gate.relative["p99_itl_ms"] == Tolerance(percent=15, direction="up")


@pytest.mark.parametrize("text, percent, direction", [
    ("+15%", 15, "up"), ("-20%", 20, "down"), ("2%", 2, "both"), ("±2.5%", 2.5, "both"), (" +0% ", 0, "up"),
])
def test_tolerance_parsing(text: str, percent: float, direction: str) -> None:
    tol = Tolerance.model_validate(text)
    assert (tol.percent, tol.direction) == (percent, direction)
    assert Tolerance.model_validate(tol.model_dump()) == tol


def test_tolerance_allows() -> None:
    up, down, both = (Tolerance.model_validate(t) for t in ("+15%", "-20%", "10%"))
    assert up.allows(100, 115) and not up.allows(100, 115.1) and up.allows(100, 10)
    assert down.allows(100, 80) and not down.allows(100, 79.9) and down.allows(100, 1000)
    assert both.allows(100, 90) and both.allows(100, 110) and not both.allows(100, 111)


def test_scenario_is_frozen() -> None:
    s = parse_scenario(copy.deepcopy(BASE))
    with pytest.raises(pydantic.ValidationError):
        s.seed = 3  # type: ignore[misc]
    assert isinstance(s, Scenario)


def test_every_problem_of_a_file_is_listed_at_once(tmp_path) -> None:
    """A scenario with three mistakes names all three on its one error line (was: the first, "and 2 more")."""
    import pytest as _pytest

    from kvplan.errors import KvplanError
    from kvplan.stress.scenario_loader import load_scenario

    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nmodel: tiny-llama\nnum_requests: -1\nseed: x\nengine:\n  block_size: 0\n")
    with _pytest.raises(KvplanError) as info:
        load_scenario(path)
    text = str(info.value)
    assert "\n" not in text and all(k in text for k in ("num_requests", "seed", "engine.block_size")), text
