"""Machine speed measured in the run: measured step times against the cost model's, and the
prediction's error once rescaled by it."""
from __future__ import annotations

import pytest

from kvplan.perf.step_cost import StepShape
from kvplan.stress.cpu_cost import LinearCostModel
from kvplan.stress.machine_speed import SpeedResampled, machine_speed, normalized_errors

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
    assert out == {
        "median_itl_ms": pytest.approx(0.0),
        "output_throughput": pytest.approx(0.0),
        "duration": pytest.approx(0.0),
    }
    assert "peak_kv_bytes" not in out  # memory does not depend on speed


def test_lumpy_contention_total_and_median_part() -> None:
    """A neighbour's time slices on one step in five (4x there): the steps took 1.6x the model in
    total, the median step none more; `machine_speed_ratio` is the total, the median kept beside."""
    shapes = _shapes(50)
    times = [(4.0 if i % 5 == 0 else 1.0) * MODEL.step_s(s) for i, s in enumerate(shapes)]
    speed = machine_speed(MODEL, shapes, times, cpu_s=None, wall_s=None)
    assert speed is not None and speed.median == pytest.approx(1.0)
    assert speed.ratio == pytest.approx(sum(times) / sum(MODEL.step_s(s) for s in shapes))
    assert speed.ratio > 1.3 and speed.figures()["machine_speed_median"] == pytest.approx(1.0)


def test_resampled_speed_uses_each_bin_s_own_ratios() -> None:
    """Short steps stalled 3x, long steps 1.2x: a rescaled short step takes 3x, a long one 1.2x, and
    over as many steps as were measured every measured ratio is used once."""
    short, long_ = StepShape.from_counts([10], [1]), StepShape.from_counts([4000] * 8, [1] * 8)
    shapes = [short] * 32 + [long_] * 32
    times = [3.0 * MODEL.step_s(short)] * 32 + [1.2 * MODEL.step_s(long_)] * 32
    speed = machine_speed(MODEL, shapes, times, None, None)
    assert speed is not None
    resampled = SpeedResampled(MODEL, speed.step_modelled_s, speed.step_ratios)
    assert resampled.step_s(short) == pytest.approx(3.0 * MODEL.step_s(short))
    assert resampled.step_s(long_) == pytest.approx(1.2 * MODEL.step_s(long_))
    mixed = SpeedResampled(MODEL, [1.0] * 20, [1.0 + i / 10 for i in range(20)], seed=3)
    drawn = sorted(mixed.step_s(short) / MODEL.step_s(short) for _ in range(20))
    assert drawn == pytest.approx([1.0 + i / 10 for i in range(20)])
