"""The figure registry is the one list: what targets and metrics produce is exactly what it names,
and the gate, the console table and the HTML report take their names from it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvplan.errors import KvplanError
from kvplan.gate.gate_block import Gate, known_gate_keys
from kvplan.results.figures import FIGURES, default_gate, figure, metric_names, names, unit_of
from kvplan.results.metrics import compute_metrics
from kvplan.results.record import RequestRecord
from kvplan.results.result import TimelineSample
from kvplan.results.slo import Slo
from kvplan.stress.runner import EngineRun


def _record(i: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", class_name="c", arrival_s=0.0, first_token_s=0.1,
                         token_times_s=(0.1, 0.2, 0.3), finish_s=0.3, prompt_tokens=8, output_tokens=3)


def test_engine_target_memory_figures_are_the_registry_memory_group() -> None:
    from kvplan.stress.targets.engine_target import measured_memory  # imports no torch until an engine is built

    run = EngineRun(timeline=[TimelineSample(t_s=0.1, kv_bytes_used=64, running=2, preemptions=0, prefix_hit_tokens=0)],
                    num_steps=1)
    engine = SimpleNamespace(num_gpu_blocks=8, bytes_per_block=32)
    assert set(measured_memory(run, [engine])) == set(names("memory"))


def test_metrics_keys_are_the_registry_metric_names() -> None:
    out = compute_metrics([_record(i) for i in range(3)], Slo(ttft_ms=500))
    assert set(out) == set(metric_names())
    assert all(figure(k) is not None for k in out)


def test_units_come_from_the_registry() -> None:
    assert unit_of("peak_kv_bytes") == "bytes" and unit_of("p99_itl_ms") == "ms" and unit_of("p99.9_itl_ms") == "ms"
    assert unit_of("output_throughput") == "tok/s" and unit_of("request_throughput") == "req/s"
    assert unit_of("duration") == "s" and unit_of("goodput_ratio") == "ratio"


def test_gate_knows_every_registry_figure_and_nothing_else() -> None:
    assert set(known_gate_keys()) == set(FIGURES)
    exact, relative = default_gate()
    assert set(exact) <= set(FIGURES) and set(relative) <= set(FIGURES) and exact and relative
    Gate(exact=["num_steps", "peak_nvml_used_bytes"])  # produced, so gateable
    for ghost in ("num_swaps", "peak_cuda_reserved_bytes"):  # named once, produced by nothing
        with pytest.raises((KvplanError, ValueError)):
            Gate(exact=[ghost])


def test_every_predicted_figure_is_in_the_prediction() -> None:
    """Simulate the ci-smoke scenario: the prediction carries every figure the registry marks predicted."""
    from pathlib import Path

    from kvplan.stress.cpu_cost import LinearCostModel
    from kvplan.stress.prediction import predict_run
    from kvplan.stress.scenario_loader import load_scenario

    scenario = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "ci-smoke.yaml")
    requests = scenario.requests()
    out = predict_run(
        scenario,
        requests,
        num_gpu_blocks=scenario.num_gpu_blocks(),
        bytes_per_block=scenario.bytes_per_block(),
        cost_model=LinearCostModel(1e-3, 1e-5, 0.0, 0.0, 0.0),
        cost_source="test",
        allocator="paged",
    )
    missing = [f.name for f in FIGURES.values() if f.predicted and (f.prediction_key or f.name) not in out]
    # preemption_onset_s is None when nothing is preempted, but the key is there
    assert missing == []
