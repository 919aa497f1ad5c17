"""Property-based fuzzing of the files kvplan reads: scenario YAML, config.json with safetensors
headers and index, result JSON (gate, baseline, report) and calibration files, each mutated at
random from a valid one and fed to the command that reads it (invariants: harness.py)."""
from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import BASELINE, CASES, FUZZ, examples, invoke, workspace
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # the slow lane (pytest -m slow): .ci/run runs it after the default lane

HOSTILE = st.sampled_from(
    [
        0,
        -1,
        -128,
        1.5,
        2**64,
        2**62,
        10**400,
        1e308,
        -1e308,
        float("nan"),
        float("inf"),
        "",
        "x" * 3000,
        "7",
        True,
        False,
        None,
        [],
        {},
        [1, 2, 3],
        {"a": 1},
        [[[[[]]]]],
        2**53 + 1,
        1e-300,
        -0.0,
    ]
)
GOOD_NUMBERS = st.one_of(
    st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.integers(2**30, 2**70)
)
# a fresh copy each draw: an edit that adds a key inside a drawn `{}` must not change the pool
VALUE = st.one_of(HOSTILE, HOSTILE, GOOD_NUMBERS, st.text(max_size=20)).map(copy.deepcopy)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) into a JSON-like document; lists contribute their first 3 items."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated(draw, base: Any, focus: tuple = ()) -> Any:
    """`base` with 1-3 random edits: a value replaced, a key deleted or added, a node wrapped in a list."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p and p[: len(focus)] == focus] or [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        holder = doc
        for key in path[:-1]:
            holder = holder[key]
        last, op = path[-1], draw(st.sampled_from(["set", "set", "set", "delete", "add", "wrap"]))
        if op == "set":
            holder[last] = draw(VALUE)
        elif op == "delete":
            del holder[last]
        elif op == "add" and isinstance(holder, dict):
            holder[draw(st.sampled_from(["extra", "zz", "head_dim", "__metadata__", "name"]))] = draw(VALUE)
        elif op == "wrap":
            holder[last] = [holder[last]]
    return doc


def _scenario_dicts() -> list[dict]:
    from kvplan.stress.scenario_loader import bundled_scenarios, load_scenario

    return [load_scenario(name).to_dict() for name in bundled_scenarios()]


SCENARIOS = _scenario_dicts()


@st.composite
def scenario_text(draw) -> str:
    text = yaml.safe_dump(draw(mutated(draw(st.sampled_from(SCENARIOS)))), allow_unicode=True)
    if draw(st.integers(0, 4)) == 0:  # now and then broken YAML: cut, or bytes spliced in
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(st.sampled_from(["", "\x00", ": [", "&a *a", "\t", "!!python/object:os.system ''", "%"]))
            + text[at + 1 :]
        )
    return text


@settings(FUZZ, max_examples=examples(130))
@given(text=scenario_text())
def test_mutated_scenarios(text: str) -> None:
    """Stress validates the scenario, the model and its workload; a valid one stops at the engine."""
    with workspace() as ws:
        path = ws / "mutated.yaml"
        path.write_text(text)
        invoke(ws, ["stress", "-s", str(path), "--out", "run", "--no-progress"], kind="scenario")


# real configs of every family the planner models: dense, sliding, MLA, MoE, quantized, multimodal
# (text_config), and the hybrids (Mamba, Gated-DeltaNet, Nemotron-H pattern, Llama-4 chunks)
CONFIG_PROFILES = ["tiny-llama", "gemma-3-4b-it", "deepseek-v2-lite", "mixtral-8x7b-v0.1", "llama-2-7b-gptq",
                   "llama-3.1-8b-instruct-w4a16", "ai21-jamba-1.5-mini", "falcon-mamba-7b", "nemotron-h-56b-base-8k",
                   "qwen3-next-80b-a3b-thinking", "llama-4-scout-17b-16e-instruct", "gpt2", "falcon-7b", "gpt-oss-20b"]


def _profile_configs() -> list[dict]:
    from kvplan.spec.profiles import model_profile

    return [json.loads(json.dumps(model_profile(name)["config"])) for name in CONFIG_PROFILES]


CONFIGS = _profile_configs()


@st.composite
def model_dir_files(draw) -> dict[str, bytes]:
    base = draw(st.sampled_from(CONFIGS))
    focus = draw(st.sampled_from([(), ("text_config",), ("quantization_config",)]))
    files = {"config.json": json.dumps(draw(mutated(base, focus))).encode()}
    kind = draw(st.sampled_from(["none", "header", "index"]))
    if kind == "header":
        header = {"w": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}, "__metadata__": {"format": "pt"}}
        body = json.dumps(draw(mutated(header))).encode()
        length = draw(st.sampled_from([len(body), len(body), 0, 2, len(body) + 100, 2**62, 2**64 - 1]))
        files["model.safetensors"] = struct.pack("<Q", length) + body + b"\0" * 8
    elif kind == "index":
        files["model.safetensors.index.json"] = json.dumps(
            draw(mutated({"metadata": {"total_size": 1000}, "weight_map": {"w": "a.safetensors"}}))
        ).encode()
    return files


@settings(FUZZ, max_examples=examples(110))
@given(files=model_dir_files(), gpu=st.booleans())
def test_mutated_model_directories(files: dict[str, bytes], gpu: bool) -> None:
    with workspace() as ws:
        folder = ws / "m"
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        invoke(ws, ["estimate", "-m", str(folder), *(["--gpu", "h100"] if gpu else [])], kind="config")


RESULT = json.loads(BASELINE.read_text())
# an HTTP run's extras too, so mutations reach into them (the engine baseline has none)
RESULT["server_telemetry"] = [
    {"t_s": 0.5, "kv_cache_usage_perc": 0.25, "num_requests_running": 2.0, "num_requests_waiting": 0.0}
]
RESULT["server_info"] = {"api": "completions", "model": "m", "num_gpu_blocks": 128}
RESULT_FOCUS = [
    ("metrics",),
    ("prediction",),
    ("per_class",),
    ("requests",),
    ("timeline",),
    ("scenario",),
    ("scenario", "workload"),
    ("scenario", "engine"),
    ("environment",),
    ("server_info",),
    ("server_telemetry",),
    (),
]


@st.composite
def result_text(draw) -> str:
    return json.dumps(draw(mutated(RESULT, draw(st.sampled_from(RESULT_FOCUS)))))


@settings(FUZZ, max_examples=examples(110))
@given(text=result_text(), command=st.sampled_from(["gate", "gate-baseline", "baseline"]))
def test_mutated_results_gate_and_baseline(text: str, command: str) -> None:
    """Exit 2 for a malformed result, 1 only for a real regression (harness: only `gate` may exit 1)."""
    with workspace() as ws:
        (ws / "mutated.json").write_text(text)
        args = {"gate": ["gate", "-r", "mutated.json", "-b", "result.json", "--junit", "j.xml"],
                "gate-baseline": ["gate", "-r", "result.json", "-b", "mutated.json"],
                "baseline": ["baseline", "update", "mutated.json", "--dir", "baselines"]}[command]
        invoke(ws, args, kind="result")


@settings(FUZZ, max_examples=examples(30))
@given(text=result_text())
def test_mutated_results_render(text: str) -> None:
    """The HTML report from a mutated result: a page or one error line (~0.2 s a page, so fewer cases)."""
    with workspace() as ws:
        (ws / "mutated.json").write_text(text)
        invoke(ws, ["report", "mutated.json", "-o", "r.html"], kind="report")


CALIBRATION = {
    "kind": "linear",
    "intercept_s": 0.004,
    "per_token_s": 1e-5,
    "per_seq_s": 1e-4,
    "per_context_token_s": 1e-8,
    "per_attention_pair_s": 1e-11,
    "model": "tiny-llama",
    "device": "cpu",
    "host": "h",
    "num_samples": 100,
    "r2": 0.9,
}


@settings(FUZZ, max_examples=examples(80))
@given(data=mutated(CALIBRATION))
def test_mutated_calibration_files(data: Any) -> None:
    """A calibration file loads into finite, non-negative coefficients or is one `KvplanError`."""
    import math
    import tempfile

    from kvplan.errors import KvplanError
    from kvplan.stress.cpu_cost import LinearCostModel

    CASES["calibration"] += 1
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cal.yaml"
        path.write_text(yaml.safe_dump(data))
        try:
            model = LinearCostModel.load(path)
        except KvplanError as exc:
            assert "\n" not in str(exc)
            return
    coefficients = (
        model.intercept_s,
        model.per_token_s,
        model.per_seq_s,
        model.per_context_token_s,
        model.per_attention_pair_s,
    )
    assert all(math.isfinite(c) and c >= 0 for c in coefficients)
