"""`--json` on the reporting commands added for CI use (issue 28): one JSON document on stdout."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.cli import main

BASELINE = Path(__file__).resolve().parents[2] / "kvplan" / "data" / "baselines" / "ci-smoke.json"


def _json(capsys, *args: str) -> tuple[int, object]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    return int(info.value.code or 0), json.loads(capsys.readouterr().out)


def test_gate_json_has_the_verdict_and_every_check(capsys) -> None:
    code, out = _json(capsys, "gate", "--baseline", str(BASELINE), "--result", str(BASELINE), "--json")
    assert code == 0 and out["passed"] is True and out["scenario"] == "ci-smoke"  # type: ignore[index]
    assert {c["metric"] for c in out["checks"]} >= {"num_gpu_blocks", "peak_kv_bytes"}  # type: ignore[index]
    code, out = _json(capsys, "gate", "--baseline", str(BASELINE), "--result", str(BASELINE), "--json",
                      "--tolerance", "num_gpu_blocks=exact", "--prediction-tolerance", "mean_ttft_ms=0%")
    assert code == (0 if out["passed"] else 1)  # type: ignore[index]


def test_profiles_json_lists_every_profile(capsys) -> None:
    from kvplan.spec.profiles import model_names

    code, out = _json(capsys, "profiles", "--json")
    assert code == 0 and [p["name"] for p in out] == model_names()  # type: ignore[union-attr]
    assert all(p["kv_bytes_per_token"] >= 0 and p["params"] > 0 for p in out)  # type: ignore[union-attr]


@pytest.mark.slow
def test_stress_json_is_stdout_alone(tmp_path: Path) -> None:
    """`kvplan stress --json`: one JSON object on stdout (files, verdict, metrics); the tables on stderr."""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvplan",
            "stress",
            "--scenario",
            "ci-smoke",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-1000:]
    out = json.loads(done.stdout)
    assert out["failed"] is False and out["written"] == [
        str(tmp_path / "run" / "result.json"),
        str(tmp_path / "run" / "report.html"),
    ]
    run = out["runs"][0]
    assert run["verdict"] == "ok" and run["metrics"]["num_gpu_blocks"] == run["prediction"]["num_gpu_blocks"] == 128
    assert "predicted vs measured" in done.stderr and "predicted vs measured" not in done.stdout  # tables: stderr


def test_sweep_json_is_the_tables_rows(capsys) -> None:
    code, out = _json(capsys, "sweep", "--model", "llama-2-7b", "--ctx", "4096,8192", "--concurrency", "8",
                      "--gpu", "h100", "--json")
    assert code == 0 and len(out) == 4  # type: ignore[arg-type]
    assert {r["kv_cache_dtype"] for r in out} == {"auto", "fp8"}  # type: ignore[union-attr]
    fp8 = [r for r in out if r["kv_cache_dtype"] == "fp8" and r["ctx"] == 4096][0]  # type: ignore[union-attr]
    auto = [r for r in out if r["kv_cache_dtype"] == "auto" and r["ctx"] == 4096][0]  # type: ignore[union-attr]
    assert fp8["kv_cache_tokens"] > 1.9 * auto["kv_cache_tokens"]  # one byte an element instead of two
