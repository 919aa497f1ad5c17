"""The gate's single checks on given figures, by hand: which side a tolerance is taken of, and
which way a signed one points."""
from __future__ import annotations

from kvplan.gate.checks import check_prediction, check_relative
from kvplan.gate.tolerance import Tolerance


def test_a_prediction_tolerance_is_a_share_of_the_measured_value() -> None:
    tol = Tolerance.model_validate("20%")
    # measured 125: 20% of it is 25, and 100 is 25 away: within; of the prediction it would be 20
    assert check_prediction("mean_ttft_ms", tol, predicted=100.0, measured=125.0).passed
    # measured 100: 20 allowed, 125 is 25 away: a miss (25% of the prediction would have let it pass)
    assert not check_prediction("mean_ttft_ms", tol, predicted=125.0, measured=100.0).passed


def test_the_prediction_check_reports_predicted_minus_measured() -> None:
    check = check_prediction("mean_ttft_ms", Tolerance.model_validate("50%"), predicted=90.0, measured=100.0)
    assert (check.baseline, check.current) == (90.0, 100.0) and check.passed and check.delta == -10.0


def test_a_signed_relative_tolerance_allows_only_its_direction() -> None:
    up = Tolerance.model_validate("+10%")
    assert check_relative("p99_itl_ms", up, baseline=100.0, current=110.0).passed
    assert not check_relative("p99_itl_ms", up, baseline=100.0, current=111.0).passed
    assert check_relative("p99_itl_ms", up, baseline=100.0, current=50.0).passed  # better is never a failure
    down = Tolerance.model_validate("-10%")
    assert check_relative("output_throughput", down, baseline=100.0, current=90.0).passed
    assert not check_relative("output_throughput", down, baseline=100.0, current=89.0).passed
    assert check_relative("output_throughput", down, baseline=100.0, current=150.0).passed
