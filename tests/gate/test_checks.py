"""The gate's single checks on given figures, by hand: which side a tolerance is taken of, and
which way a signed one points."""
from __future__ import annotations

import pytest

from kvplan.gate.checks import check_exact, check_prediction, check_relative
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


def test_one_sign_convention_for_deltas_and_errors() -> None:
    """The same pair (reference 100, other 130): a baseline check's delta is (current - baseline) /
    baseline = +30%; a prediction check's error is (predicted - measured) / measured with the
    prediction 100 and the measurement 130: -23.1% (the prediction read low)."""

    exact = check_exact("m", 100.0, 130.0)
    assert exact.delta == 30.0 and exact.delta_pct == pytest.approx(30.0)
    assert exact.delta_formula == "(current - baseline) / baseline"
    predicted = check_prediction("m", Tolerance.model_validate("10%"), predicted=100.0, measured=130.0)
    assert predicted.delta == -30.0 and predicted.delta_pct == pytest.approx(-23.08, abs=0.01)
    assert predicted.delta_formula == "(predicted - measured) / measured"
