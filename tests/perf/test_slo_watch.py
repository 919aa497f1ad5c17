"""`SloWatch` (kvplan.perf.slo_watch): a miss is certain once more requests are over a limit than
numpy's linear percentile leaves room for, worked by hand."""
from __future__ import annotations

import numpy as np

from kvplan.perf.slo_watch import SloWatch
from kvplan.results.slo import Slo
from kvplan.workload.request import Request


def _requests(n: int, out: int = 8) -> list[Request]:
    return [Request(0.0, 16, out) for _ in range(n)]


def test_allowed_overs_by_hand() -> None:
    # n = 150 at P99: numpy's P99 interpolates at rank 149 x 0.99 = 147.51, between ranks 147 and
    # 148; with 3 values over the limit ranks 147..149 are over, so P99 is over; with 2 it is not
    watch = SloWatch.of(Slo(ttft_ms=100.0, tpot_ms=10.0, percentile=99.0), 0.0, _requests(150))
    assert (watch.ttft_allowed, watch.tpot_allowed) == (2, 2)
    values = np.array([50.0] * 148 + [200.0] * 2)
    assert np.percentile(values, 99) > 100.0  # two over already lift the interpolated P99 ...
    assert [watch.first_token(0.0, 0.2) for _ in range(3)] == [False, False, True]  # ... but only 3 make it certain


def test_single_token_requests_have_no_tpot() -> None:
    reqs = _requests(10) + [Request(0.0, 16, 1)] * 90
    watch = SloWatch.of(Slo(ttft_ms=1.0, tpot_ms=1.0, percentile=50.0), 0.0, reqs)
    # TTFT over 100 requests: rank floor(99 x 0.5) = 49 -> 100 - 49 - 1 = 50; TPOT over 10: 10 - 4 - 1 = 5
    assert (watch.ttft_allowed, watch.tpot_allowed) == (50, 5)
    one = SloWatch.of(Slo(ttft_ms=1.0, tpot_ms=1.0, percentile=99.0), 0.0, [Request(0.0, 16, 1)])
    assert one.tpot_allowed == 1 << 62  # no TPOT at all: never decides


def test_latency_outside_the_engine_counts_and_limits_are_strict() -> None:
    watch = SloWatch(Slo(ttft_ms=750.0, tpot_ms=125.0, percentile=99.0), 0.25, 0, 0)  # binary-exact times
    assert not watch.first_token(1.0, 1.5)  # 500 ms + 250 ms outside = exactly the limit: not over
    assert watch.first_token(1.0, 1.5 + 2**-10)
    assert not watch.finished(1.0, 1.5, 5)  # 500 ms over 4 gaps: 125 ms, the limit (no latency in gaps)
    assert watch.finished(1.0, 1.5 + 2**-10, 5)


def test_no_limit_is_never_over() -> None:
    watch = SloWatch(Slo(ttft_ms=None, tpot_ms=None, percentile=99.0), 0.0, 0, 0)
    assert not watch.first_token(0.0, 1e6) and not watch.finished(0.0, 1e6, 2)


def test_a_tpot_miss_is_certain_after_allowed_plus_one_overs() -> None:
    # two-token requests have a TPOT (one gap): 150 of them at P99 leave room for 2 over
    watch = SloWatch.of(Slo(ttft_ms=None, tpot_ms=10.0, percentile=99.0), 0.0, _requests(150, out=2))
    assert watch.tpot_allowed == 2
    assert [watch.finished(0.0, 0.02, 2) for _ in range(3)] == [False, False, True]
    assert watch.tpot_over == 3
