"""Each gate check's whole record (metric, reference, current, delta, limit, passed, kind, note),
worked by hand from the rules in kvplan/gate/checks.py's docstrings: a delta is current - baseline
(a prediction check's predicted - measured), a side without a value fails and says which, and a
signed tolerance must name the direction that is worse."""
from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.gate.checks import GateCheck, check_exact, check_prediction, check_relative, parse_overrides, relative_kind
from kvplan.gate.tolerance import Tolerance

TEN = Tolerance.model_validate("10%")
UP = Tolerance.model_validate("+10%")


def test_exact_records() -> None:
    assert check_exact("num_gpu_blocks", 100, 100) == GateCheck("num_gpu_blocks", 100, 100, 0, "exact", True, "exact")
    assert check_exact("num_gpu_blocks", 100, 98) == GateCheck("num_gpu_blocks", 100, 98, -2, "exact", False, "exact")
    assert check_exact("num_gpu_blocks", None, 98) == GateCheck(
        "num_gpu_blocks", None, 98, None, "exact", False, "exact", "missing from the baseline")
    assert check_exact("num_gpu_blocks", 100, None) == GateCheck(
        "num_gpu_blocks", 100, None, None, "exact", False, "exact", "missing from the result")
    assert check_exact("num_gpu_blocks", None, None) == GateCheck(
        "num_gpu_blocks", None, None, None, "exact", True, "exact", "not measured in either baseline or result")


def test_relative_records_and_their_kinds() -> None:
    assert relative_kind("p99_ttft_ms") == "raw" and relative_kind("request_throughput") == "raw"
    assert relative_kind("peak_kv_bytes") == "relative"
    assert check_relative("peak_kv_bytes", UP, 100.0, 110.0) == GateCheck(
        "peak_kv_bytes", 100.0, 110.0, 10.0, "+10%", True, "relative")
    assert check_relative("peak_kv_bytes", UP, 100.0, 111.0) == GateCheck(
        "peak_kv_bytes", 100.0, 111.0, 11.0, "+10%", False, "relative")
    assert check_relative("peak_kv_bytes", UP, None, 5.0) == GateCheck(
        "peak_kv_bytes", None, 5.0, None, "+10%", False, "relative", "missing from the baseline")
    # a raw (wall-clock) miss on a contended machine is reported, not failed; a relative one is failed
    assert check_relative("p99_ttft_ms", UP, 100.0, 150.0, excuse="machine contended: x") == GateCheck(
        "p99_ttft_ms", 100.0, 150.0, 50.0, "+10%", True, "raw", "beyond the limit, not failed: machine contended: x")
    assert check_relative("peak_kv_bytes", UP, 100.0, 150.0, excuse="machine contended: x").passed is False


def test_prediction_records() -> None:
    # predicted 90, measured 100: delta = predicted - measured = -10, inside 10% of measured
    assert check_prediction("peak_kv_bytes", TEN, 90.0, 100.0) == GateCheck(
        "peak_kv_bytes", 90.0, 100.0, -10.0, "±10% of measured", True, "prediction")
    assert check_prediction("peak_kv_bytes", TEN, 120.0, 100.0) == GateCheck(
        "peak_kv_bytes", 120.0, 100.0, 20.0, "±10% of measured", False, "prediction")
    assert check_prediction("peak_kv_bytes", TEN, None, 100.0) == GateCheck(
        "peak_kv_bytes", None, 100.0, None, "±10% of measured", False, "prediction", "missing from the prediction")
    at_speed = check_prediction("mean_ttft_ms", TEN, 120.0, 100.0, at_measured_speed_pct=10.0)  # at the limit: held
    assert at_speed == GateCheck("mean_ttft_ms", 120.0, 100.0, 20.0, "±10% of measured", True, "prediction",
                                 "beyond the limit on the wall clock, +10.0% at the measured machine speed: "
                                 "the machine's speed, not the model (as the report says)")
    assert check_prediction("mean_ttft_ms", TEN, 120.0, 100.0, at_measured_speed_pct=10.5).passed is False


@pytest.mark.parametrize("item, needle", [
    ("p99_ttft_ms=-10%", "would let p99_ttft_ms get worse without limit (higher is worse); write '+10%' or '10%'"),
    ("request_throughput=+10%", "(lower is worse); write '-10%' or '10%'"),
    ("p99_ttft_ms=+0%", "is a signed zero; write 'p99_ttft_ms=exact' or 'p99_ttft_ms=0%'"),
    ("p99_ttft_ms", "takes NAME=TOLERANCE such as p99_itl_ms=+15% or peak_kv_bytes=exact, got 'p99_ttft_ms'"),
    ("p99_tft_ms=10%", "'p99_tft_ms': unknown metric; did you mean: p99_ttft_ms"),
    ("p99_ttft_ms=fast", "'fast' is not a tolerance such as '+15%', '-20%' or '2%'"),
])
def test_tolerance_overrides_refused_in_words(item: str, needle: str) -> None:
    with pytest.raises(KvplanError) as info:
        parse_overrides([item], "--tolerance", allow_exact=True)
    assert needle in str(info.value) and str(info.value).startswith("--tolerance")


def test_tolerance_overrides_taken() -> None:
    got = parse_overrides(["p99_ttft_ms=+15%", "peak_kv_bytes=exact", "request_throughput=-5%", "mean_itl_ms=3%"],
                          "--tolerance", allow_exact=True)
    assert got == {"p99_ttft_ms": Tolerance.model_validate("+15%"), "peak_kv_bytes": "exact",
                   "request_throughput": Tolerance.model_validate("-5%"), "mean_itl_ms": Tolerance.model_validate("3%")}
    with pytest.raises(KvplanError, match="prediction tolerances are symmetric: write '15%', not '\\+15%'"):
        parse_overrides(["p99_ttft_ms=+15%"], "--prediction-tolerance", allow_exact=False)
    with pytest.raises(KvplanError, match="takes NAME=TOLERANCE such as p99_itl_ms=\\+15%, got"):
        parse_overrides(["x"], "--prediction-tolerance", allow_exact=False)
