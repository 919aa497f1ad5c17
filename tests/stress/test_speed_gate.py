"""The CI gate tells a slower engine from a slower machine: ci-smoke with every engine step made
2x as costly fails it against the committed baseline, and the same engine beside one CPU hog per
core (it waits for a CPU a large share of its time) passes it: the normalized figures take each
request's own CPU waits out (stress/cpu_waits.py) before dividing by the reference kernel's time. Both runs are real `kvplan stress`
runs in a subprocess; nothing is mocked but the regression itself (tests/stress/slowed_stress.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.engine.threads import usable_cores
from kvplan.gate.checks import run_gate
from kvplan.stress.result import RunResult, load_result

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "reports" / "baselines" / "ci-smoke.json"
SLOWED = Path(__file__).resolve().parent / "slowed_stress.py"
NORMALIZED = {"median_itl_ref", "mean_tpot_ref", "output_tokens_per_ref"}  # ci-smoke gates these at +25% / -20%

pytestmark = pytest.mark.slow


def _stress(out: Path, *, factor: float = 1.0, hogs: int = 0) -> RunResult:
    """ci-smoke on the bundled engine, each step `factor` times as costly, beside `hogs` busy loops."""
    busy = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(hogs)]
    try:
        done = subprocess.run([sys.executable, str(SLOWED), str(factor), "stress", "--scenario", "ci-smoke",
                               "--out", str(out), "--no-progress"], capture_output=True, text=True, timeout=900)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    return load_result(out / "result.json")


def test_an_engine_twice_as_slow_per_step_fails_the_ci_gate(tmp_path: Path) -> None:
    slow = _stress(tmp_path / "slow", factor=2.0)
    verdict = run_gate(load_result(BASELINE), slow)
    assert not verdict.passed
    failed = {c.metric: c for c in verdict.failures}
    assert NORMALIZED <= set(failed), verdict.failures  # each normalized figure catches it on its own
    assert all(failed[m].kind == "normalized" for m in NORMALIZED)
    assert all(c.passed for c in verdict.checks if c.kind == "exact")  # the schedule did not change, only time


def test_the_same_engine_beside_a_cpu_hog_per_core_passes_the_ci_gate(tmp_path: Path) -> None:
    hogged = _stress(tmp_path / "hogged", hogs=usable_cores())
    assert hogged.metrics["cpu_wait_share"] > 0.2  # the load was real: a neighbour held the engine's core
    verdict = run_gate(load_result(BASELINE), hogged)
    assert verdict.passed, [(c.metric, c.current, c.baseline, c.note) for c in verdict.failures]
    assert {c.metric for c in verdict.checks if c.kind == "normalized"} >= NORMALIZED
    # the slowdown is recorded and said (on the machine the bundled calibration was taken on: elsewhere
    # the ratio also holds that machine's own speed, which may be faster); the hog's share of it also
    # shows as CPU time per reference kernel (a busy sibling hyperthread), so that is not divided out
    m = hogged.metrics
    if not hogged.environment.calibration_mismatch:
        assert m["machine_speed_ratio"] > 1.3, m["machine_speed_ratio"]
        assert any("slower than calibrated" in n for n in hogged.notes), hogged.notes
    # and once the prediction runs at the measured speed, it holds (issue 16's acceptance: 25%)
    for name in ("mean_ttft_ms", "median_itl_ms"):
        assert abs(hogged.normalized_error_pct[name]) <= 25.0, hogged.normalized_error_pct
