"""Machine speed measured in the run: measured step times against the cost model's, and the
prediction's error once rescaled by it."""
from __future__ import annotations

import pytest

from kvplan.stress.cost import LinearCostModel, StepShape
from kvplan.stress.machine_speed import machine_speed, normalized_errors

MODEL = LinearCostModel(1e-3, 1e-5, 1e-5, 0.0, 0.0)


def _shapes(n: int) -> list[StepShape]:
    return [StepShape.from_counts([10 * i] * (1 + i % 4), [1] * (1 + i % 4)) for i in range(n)]


def test_a_machine_twice_as_slow_reads_2x() -> None:
    shapes = _shapes(50)
    times = [2.0 * MODEL.step_s(s) for s in shapes]
    speed = machine_speed(MODEL, shapes, times, cpu_s=3.0, wall_s=2.0)
    assert speed is not None and speed.ratio == pytest.approx(2.0) and speed.p10 == pytest.approx(2.0)
    assert speed.cpu_busy_cores == pytest.approx(1.5)
    assert "2.00x the calibrated step time" in speed.sentence() and "slower than calibrated" in speed.sentence()


def test_no_speed_without_a_model_or_enough_steps() -> None:
    shapes = _shapes(5)
    assert machine_speed(None, shapes, [1.0] * 5, None, None) is None
    assert machine_speed(MODEL, shapes, [MODEL.step_s(s) for s in shapes], None, None) is None  # 5 < MIN_STEPS


def test_normalized_errors_rescale_times_and_rates() -> None:
    prediction = {"median_itl_ms": 3.0, "output_throughput": 1000.0, "duration_s": 10.0, "peak_kv_bytes": 100}
    measured = {"median_itl_ms": 6.0, "output_throughput": 500.0, "duration": 20.0, "peak_kv_bytes": 100}
    out = normalized_errors(prediction, measured, ratio=2.0)  # everything off by exactly the machine's speed
    assert out == {"median_itl_ms": pytest.approx(0.0), "output_throughput": pytest.approx(0.0), "duration": pytest.approx(0.0)}
    assert "peak_kv_bytes" not in out  # memory does not depend on speed
