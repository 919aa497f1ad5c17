"""Published vLLM start-up logs outside the fitted vLLM 0.19 / H100 set (tests/data/reference/
vllm-startup-logs.csv): V0's profile-run activation, the RTX 3090's visible memory, and the accuracy
benchmark that groups every row by vLLM version and GPU."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from startup_log_replay import CalibrationRow, load_calibration

from kvplan.spec.gpu import load_gpu
from kvplan.units import GIB

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_accuracy.py"


@pytest.fixture(scope="module")
def log_rows(reference_dir) -> list[CalibrationRow]:
    return load_calibration(reference_dir / "vllm-startup-logs.csv")


def test_v0_activation_is_one_prefill_of_max_model_len(log_rows):
    """V0 (vllm/worker/worker.py profile_run) runs one max_model_len prefill below 32K: its peak is
    3 x (hidden + MLP width) elements per token, the logged peak_torch - weights within 1%."""
    v0 = [r for r in log_rows if r.version_group == "V0" and r.raw["activation_gib"]]
    assert len(v0) >= 2
    for row in v0:
        logged = float(row.raw["activation_gib"]) * GIB
        assert abs(row.plan().activation_bytes - logged) <= 0.01 * logged, row.index


def test_v0_pool_is_checked_against_max_model_len(log_rows):
    """The 29K row: vLLM refused to start, V0's error names the pool's tokens; kvplan predicts the refusal."""
    row = next(r for r in log_rows if r.raw["max_model_len"] == "29000")
    plan = row.plan()
    assert not plan.fits and "larger than the maximum number of tokens that can be stored in KV cache" in plan.error


def test_rtx_3090_visible_memory_is_the_logged_total(log_rows):
    logged = {float(r.raw["gpu_mem_gib"]) for r in log_rows if r.raw["gpu"] == "RTX 3090"}
    assert logged and abs(load_gpu("rtx-3090").memory_bytes / GIB - logged.pop()) < 0.005


@pytest.mark.parametrize(("version", "group"), [("0.6.4.post1", "V0"), ("0.7.3", "V0"), ("0.8 (V0 engine)", "V0"),
                                                ("0.8.5.dev12", "early V1 (0.8-0.9)"), ("0.9.2", "early V1 (0.8-0.9)"),
                                                ("0.11.0+cu128", "V1 0.10-0.18"), ("0.19.0", "V1 0.19+")])
def test_version_groups(version, group):
    assert CalibrationRow(1, {"vllm_version": version, "gpu": "H100 80GB"}).version_group == group


def test_benchmark_reports_every_group(capsys):
    rc = runpy.run_path(str(BENCHMARK))["main"]()  # its default files: both reference CSVs
    out = capsys.readouterr().out
    assert rc == 0  # the fitted 0.19 rows still meet the acceptance
    for heading in (
        "|error| by vLLM version group",
        "|error| by GPU",
        "V0 [tokens]",
        "V0 [weights]",
        "V1 0.19+ [tokens]",
        "RTX 3090 [tokens]",
        "H100 80GB [tokens]",
    ):
        assert heading in out


def test_gemma3_weights_count_the_vision_tower_and_both_rope_caches(log_rows):
    """Gemma-3-27B, TP 4: 'Model loading took 13.1664 GB' per rank (vllm-project/vllm #16378). kvplan adds the
    SigLIP tower + projector and vLLM's two RoPE caches: the global layers' LinearScalingRotaryEmbedding holds
    max_position x factor positions (vllm/model_executor/layers/rotary_embedding.py), the sliding layers' one
    max_position (rope_local_base_freq)."""
    from kvplan.plan import overheads as oh
    from kvplan.spec.profiles import load_model

    spec = load_model("gemma-3-27b-it")
    text = spec.config["text_config"]
    rot = spec.head_dim
    factor = int(text["rope_scaling"]["factor"])
    assert (
        oh._rotary_cache_bytes(spec, 2)
        == (spec.max_position_embeddings * factor + spec.max_position_embeddings) * rot * 2
    )
    row = next(r for r in log_rows if r.raw["model"] == "google/gemma-3-27b-it")
    kind, err = row.error(row.plan())
    assert kind == "weights" and abs(err) < 0.01
