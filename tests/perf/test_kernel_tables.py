"""LogGrid: measured kernel latencies on a grid, the fastest kernel per point, a point never slower
than a larger one, interpolation linear in log space, linear growth past the last point. Expected
values by hand from the rows given."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from kvplan.perf.kernel_tables import LogGrid


def _grid() -> LogGrid:
    # m = 1 has two kernels (5 ms, 3 ms): vLLM picks the faster; m = 4: 10 ms; m = 16: 8 ms (an outlier
    # slower point at 4 is capped by the larger point's 8 ms: more work is never faster)
    rows = [{"m": 1, "latency": 5.0}, {"m": 1, "latency": 3.0}, {"m": 4, "latency": 10.0}, {"m": 16, "latency": 8.0}]
    return LogGrid(pd.DataFrame(rows), ["m"])


def test_the_fastest_kernel_at_a_point_is_kept() -> None:
    assert _grid()(1) == pytest.approx(3.0)


def test_a_point_is_at_most_any_larger_one() -> None:
    assert _grid()(4) == pytest.approx(8.0)


def test_interpolation_is_linear_in_log_space() -> None:
    # m = 2 is halfway between 1 and 4 in log space: (3 + 8) / 2
    assert _grid()(2) == pytest.approx(5.5)
    assert _grid()(math.sqrt(2)) == pytest.approx(3.0 + 0.25 * 5.0)


def test_growth_past_the_last_point_is_linear() -> None:
    assert _grid()(64) == pytest.approx(8.0 * 4)
    assert _grid()(0.5) == pytest.approx(3.0)  # below the first point: the first point's time
