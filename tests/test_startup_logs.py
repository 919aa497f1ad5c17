"""Published vLLM start-up logs outside the fitted vLLM 0.19 / H100 set (tests/data/reference/
vllm-startup-logs.csv): V0's profile-run activation, the RTX 3090's visible memory, and the accuracy
benchmark that groups every row by vLLM version and GPU."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from kvplan.plan.calibration import CalibrationRow, load_calibration
from kvplan.spec.gpu import load_gpu
from kvplan.units import GIB

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "vllm_accuracy.py"


@pytest.fixture(scope="module")
def log_rows(reference_dir) -> list[CalibrationRow]:
    return load_calibration(reference_dir / "vllm-startup-logs.csv")


def test_v0_activation_is_one_prefill_of_max_model_len(log_rows):
    """V0 (vllm/worker/worker.py profile_run) runs one max_model_len prefill below 32K: its peak is
    3 x (hidden + MLP width) elements per token, the logged peak_torch - weights within 1%."""
    v0 = [r for r in log_rows if r.version_group.startswith("V0")]
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


@pytest.mark.parametrize(("version", "group"), [("0.6.4.post1", "V0 (<= 0.7)"), ("0.7.3", "V0 (<= 0.7)"),
                                                ("0.8.5.dev12", "early V1 (0.8-0.9)"), ("0.9.2", "early V1 (0.8-0.9)"),
                                                ("0.11.0+cu128", "V1 0.10-0.18"), ("0.19.0", "V1 0.19+")])
def test_version_groups(version, group):
    assert CalibrationRow(1, {"vllm_version": version, "gpu": "H100 80GB"}).version_group == group


def test_benchmark_reports_every_group(capsys):
    rc = runpy.run_path(str(BENCHMARK))["main"]()  # its default files: both reference CSVs
    out = capsys.readouterr().out
    assert rc == 0  # the fitted 0.19 rows still meet the acceptance
    for heading in ("|error| by vLLM version group", "|error| by GPU", "V0 (<= 0.7) [tokens]", "V1 0.19+ [tokens]",
                    "RTX 3090 [tokens]", "H100 80GB [tokens]"):
        assert heading in out
