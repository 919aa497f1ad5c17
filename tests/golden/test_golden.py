"""Behaviour kept identical across refactors: each command's output equals its golden file."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from golden_cases import ESTIMATE, PLAN, PREDICT, SCENARIOS

from kvplan.cli import main

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
UPDATE = os.environ.get("KVPLAN_UPDATE_GOLDEN") == "1"


def _check(name: str, value: object) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(value, indent=1, sort_keys=True) + "\n"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run with KVPLAN_UPDATE_GOLDEN=1 once, on the code before the change"
    assert json.loads(text) == json.loads(path.read_text()), f"{name} differs from {path}"


def _json_of(capsys, *args: str) -> object:
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--json"])
    out, err = capsys.readouterr()
    assert exit_info.value.code in (0, 1), err
    return {"exit_code": exit_info.value.code, "output": json.loads(out)}


@pytest.mark.parametrize("name", sorted(ESTIMATE))
def test_estimate(capsys, name: str) -> None:
    _check(f"estimate-{name}", _json_of(capsys, "estimate", *ESTIMATE[name]))


@pytest.mark.parametrize("name", sorted(PREDICT))
def test_predict(capsys, name: str) -> None:
    _check(f"predict-{name}", _json_of(capsys, "predict", *PREDICT[name]))


@pytest.mark.parametrize("name", sorted(PLAN))
def test_plan(capsys, name: str) -> None:
    _check(f"plan-{name}", _json_of(capsys, "plan", *PLAN[name]))


@pytest.mark.parametrize("name", SCENARIOS)
def test_stress_prediction(name: str) -> None:
    """The prediction `kvplan stress` stores before running each bundled scenario (pool from the
    built engine, simulated with the bundled calibration)."""
    from golden_stress import stress_prediction

    _check(f"stress-{name}", stress_prediction(name))
