"""The prediction `kvplan stress` makes before a bundled scenario runs, without running it."""
from __future__ import annotations

from typing import Any

from kvplan.stress.driver import prediction_before_run
from kvplan.stress.scenario_loader import load_scenario
from kvplan.stress.stress_run import scenario_requests
from kvplan.stress.targets.engine_target import EngineTarget


def stress_prediction(name: str) -> dict[str, Any]:
    scenario = load_scenario(name)
    requests = scenario_requests(scenario)
    prediction, _, notes = prediction_before_run(scenario, requests, EngineTarget(scenario, "paged"), None)
    prediction.pop("cost_model_source", None)  # a file path: where the calibration was found
    return {"prediction": prediction, "notes": [n for n in notes if not n.startswith("cost model: calibrated")]}
