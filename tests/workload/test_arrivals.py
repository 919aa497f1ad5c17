"""Arrivals, a tagged union on `type`: each member's own fields, gaps and ramps checked by hand."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from kvplan.validation import first_error
from kvplan.workload.arrivals import Arrival, ClosedLoop, ConstantArrival, PoissonArrival

ARRIVAL = TypeAdapter(Arrival)


def _first(data: dict) -> tuple[tuple, str]:
    with pytest.raises(ValidationError) as info:
        ARRIVAL.validate_python(data)
    return first_error(info.value)


def test_type_selects_the_member() -> None:
    assert isinstance(ARRIVAL.validate_python({"type": "poisson", "rate_per_s": 2.0}), PoissonArrival)
    assert isinstance(ARRIVAL.validate_python({"type": "constant", "rate_per_s": 2.0}), ConstantArrival)
    closed = ARRIVAL.validate_python({"type": "concurrency", "concurrency": 3})
    assert isinstance(closed, ClosedLoop) and closed.closed_loop and closed.in_flight_cap == 3


def test_a_key_of_another_member_is_named_as_such() -> None:
    loc, text = _first({"type": "constant", "rate_per_s": 2, "burstiness": 0.5})
    assert loc == ("burstiness",) and "arrival type constant" in text and "poisson" in text
    loc, text = _first({"type": "concurrency", "concurrency": 4, "rate_per_s": 2})
    assert loc == ("rate_per_s",) and "closed-loop" in text
    loc, text = _first({"type": "poison", "rate_per_s": 2})
    assert loc == ("type",) and "'poisson'" in text
    loc, text = _first({"type": "poisson"})
    assert loc == ("rate_per_s",) and text == "is required"
    loc, text = _first({"type": "poisson", "rate_per_s": 2, "colour": "red"})
    assert loc == ("colour",) and "unknown key" in text


def test_constant_gaps_are_one_over_the_rate() -> None:
    times = ConstantArrival(rate_per_s=4.0).times(np.random.default_rng(0))
    assert [next(times) for _ in range(5)] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_poisson_gaps_have_mean_one_over_rate_and_gamma_shape() -> None:
    # Gamma(k, 1/(rate k)): mean 1/rate, variance 1/(k rate^2); k = 0.25 -> coefficient of variation 2
    times = PoissonArrival(rate_per_s=10.0, burstiness=0.25).times(np.random.default_rng(1))
    gaps = np.diff([next(times) for _ in range(40_001)])
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)


def test_ramp_maps_full_rate_time_through_the_ramp() -> None:
    # rate grows linearly to 2/s over 10 s: by t the ramp delivered t^2/(2*10) full-rate seconds, so
    # the k-th request (k/2 full-rate seconds) arrives at sqrt(10 k) while k/2 <= 5, then at k/2 + 5
    times = ConstantArrival(rate_per_s=2.0, ramp_s=10.0).times(np.random.default_rng(0))
    got = [next(times) for _ in range(14)]
    expected = [np.sqrt(10 * k) if k / 2 <= 5 else k / 2 + 5 for k in range(14)]
    assert got == pytest.approx(expected)


def test_closed_loop_limit_ramps_from_one() -> None:
    arrival = ClosedLoop(concurrency=16, ramp_s=8.0)
    assert [arrival.limit(t) for t in (0.0, 1.0, 4.0, 8.0, 100.0)] == [1, 2, 8, 16, 16]
    assert ClosedLoop(concurrency=5).limit(0.0) == 5


def test_ramp_rates_follow_vllm_s_formula() -> None:
    """vLLM 0.19.1 serve.py _get_current_request_rate, by hand: linear 1 -> 3 over 3 requests is
    1, 2, 3 req/s; exponential 1 -> 16 over 5 requests doubles each time."""
    from kvplan.workload.arrivals import RampArrival

    linear = RampArrival(strategy="linear", start_rate_per_s=1, end_rate_per_s=3)
    assert [linear.rate_at(i, 3) for i in range(3)] == [1.0, 2.0, 3.0]
    exponential = RampArrival(strategy="exponential", start_rate_per_s=1, end_rate_per_s=16)
    assert [exponential.rate_at(i, 5) for i in range(5)] == pytest.approx([1, 2, 4, 8, 16])
    # nearly constant gaps (burstiness 1000): request i waits ~1/rate_i after the one before, the
    # first its own gap too (as vLLM's first request)
    smooth = RampArrival(strategy="linear", start_rate_per_s=1, end_rate_per_s=3, burstiness=1000)
    times = list(smooth.times(np.random.default_rng(0), 3))
    assert times == pytest.approx([1.0, 1.5, 1.5 + 1 / 3], rel=0.1)


def test_a_ramp_needs_a_request_count() -> None:
    from kvplan.errors import KvplanError
    from kvplan.workload.arrivals import RampArrival

    with pytest.raises(KvplanError, match="num_requests"):
        next(RampArrival(start_rate_per_s=1, end_rate_per_s=2).times(np.random.default_rng(0)))
