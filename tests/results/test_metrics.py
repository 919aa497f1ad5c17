"""Metric definitions on hand-made records with hand-computed answers."""
from __future__ import annotations

import numpy as np
import pytest

from kvplan.results.figures import metric_names
from kvplan.results.metrics import compute_metrics, compute_per_class_metrics, meets_slo, summarize_ms
from kvplan.results.record import RequestRecord
from kvplan.results.slo import Slo


def rec(rid: str, cls: str, arrival: float, tokens: list[float], finish: float | None, prompt: int,
        status: str = "ok", warmup: bool = False) -> RequestRecord:
    return RequestRecord(request_id=rid, class_name=cls, arrival_s=arrival, first_token_s=tokens[0] if tokens else None,
                         token_times_s=tokens, finish_s=finish, prompt_tokens=prompt, output_tokens=len(tokens),
                         status=status, error="boom" if status == "error" else None, is_warmup=warmup)


# r1: TTFT 0.5, TPOT (0.8-0.5)/2 = 0.15, gaps 0.1 0.2, E2E 0.8
# r2: TTFT 0.2, TPOT 0.3, gap 0.3, E2E 0.5
# r3: TTFT 1.0, one token: no TPOT, no gaps, E2E 1.0
# r4: error; r5: warmup (its long life must not stretch the span)
RECORDS = [
    rec("r1", "a", 0.0, [0.5, 0.6, 0.8], 0.8, 10),
    rec("r2", "b", 1.0, [1.2, 1.5], 1.5, 20),
    rec("r3", "a", 2.0, [3.0], 3.0, 30),
    rec("r4", "b", 2.5, [], 2.6, 40, status="error"),
    rec("r5", "a", -5.0, [-4.0, -3.0], 10.0, 50, warmup=True),
]


def test_hand_computed_latencies() -> None:
    m = compute_metrics(RECORDS)
    assert m["mean_ttft_ms"] == pytest.approx((500 + 200 + 1000) / 3)
    assert m["median_ttft_ms"] == pytest.approx(500)
    assert m["mean_tpot_ms"] == pytest.approx(225) and m["median_tpot_ms"] == pytest.approx(225)
    assert m["mean_itl_ms"] == pytest.approx(200) and m["median_itl_ms"] == pytest.approx(200)  # pooled 100, 200, 300
    assert m["mean_e2el_ms"] == pytest.approx((800 + 500 + 1000) / 3)
    assert m["std_tpot_ms"] == pytest.approx(75)  # population std of 150, 300
    assert m["p99_itl_ms"] == pytest.approx(np.percentile([100, 200, 300], 99))


def test_counts_and_throughput() -> None:
    m = compute_metrics(RECORDS)
    assert (m["num_requests"], m["completed"], m["failed"], m["errored"], m["aborted"]) == (4, 3, 1, 1, 0)
    assert m["duration"] == pytest.approx(3.0)  # first arrival 0.0 to last finish 3.0, warmup excluded
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (60, 6)
    assert m["request_throughput"] == pytest.approx(1.0)
    assert m["output_throughput"] == pytest.approx(2.0)
    assert m["total_token_throughput"] == pytest.approx(22.0)
    assert m["max_concurrent_requests"] == 2  # r3 and r4 overlap
    assert m["request_goodput"] is None and m["slo_met"] is None  # no SLO given


def test_duration_override() -> None:
    assert compute_metrics(RECORDS, duration_s=6.0)["output_throughput"] == pytest.approx(1.0)


def test_percentiles_equal_numpy() -> None:
    rng = np.random.default_rng(0)
    values = rng.lognormal(0, 1, size=997)
    out = summarize_ms(values, "x", (50, 90, 95, 99, 99.9))
    for p, key in ((50, "p50"), (90, "p90"), (95, "p95"), (99, "p99"), (99.9, "p99.9")):
        assert out[f"{key}_x_ms"] == pytest.approx(np.percentile(values * 1000, p), rel=1e-12)
    assert out["median_x_ms"] == pytest.approx(np.median(values * 1000))
    assert out["std_x_ms"] == pytest.approx(np.std(values * 1000))


def test_no_data_is_none_not_zero() -> None:
    m = compute_metrics([rec("e", "a", 0.0, [], 1.0, 5, status="aborted")])
    assert m["completed"] == 0 and m["aborted"] == 1 and m["failed"] == 1
    assert m["mean_ttft_ms"] is None and m["p99_itl_ms"] is None
    assert compute_metrics([])["duration"] is None


def test_goodput_every_slo_must_hold() -> None:
    slo = Slo(ttft_ms=600, tpot_ms=200)
    # r1 meets both; r2 misses TPOT (300 ms); r3 misses TTFT (1000 ms); r4 failed
    assert [meets_slo(r, slo) for r in RECORDS[:4]] == [True, False, False, False]
    m = compute_metrics(RECORDS, slo)
    assert m["good_requests"] == 1
    assert m["request_goodput"] == pytest.approx(1 / 3.0)
    assert m["goodput_ratio"] == pytest.approx(1 / 4)
    assert m["slo_met"] is False  # p99 TTFT is ~990 ms > 600 ms


def test_goodput_itl_is_the_requests_own_percentile() -> None:
    slo = Slo(itl_ms=160, percentile=50)
    # r1 gaps 100, 200 -> median 150 <= 160: ok; r2 gap 300: no; r3 has no gaps: vacuous
    assert [meets_slo(r, slo) for r in RECORDS[:3]] == [True, False, True]
    m = compute_metrics(RECORDS, slo)
    assert m["good_requests"] == 2
    assert "p50_itl_ms" in m


def test_slo_percentile_adds_its_key() -> None:
    m = compute_metrics(RECORDS, Slo(ttft_ms=5000, percentile=99.9))
    assert m["p99.9_ttft_ms"] == pytest.approx(np.percentile([500, 200, 1000], 99.9))
    assert m["slo_met"] is True


def test_per_class_split() -> None:
    per = compute_per_class_metrics(RECORDS, Slo(ttft_ms=600))
    assert set(per) == {"a", "b"}
    assert per["a"]["completed"] == 2 and per["a"]["failed"] == 0
    assert per["a"]["mean_ttft_ms"] == pytest.approx(750)
    assert per["b"]["completed"] == 1 and per["b"]["errored"] == 1
    assert per["b"]["mean_tpot_ms"] == pytest.approx(300)
    total = compute_metrics(RECORDS)["output_throughput"]
    assert per["a"]["output_throughput"] + per["b"]["output_throughput"] == pytest.approx(total)  # same span
    assert per["a"]["good_requests"] == 1 and per["b"]["good_requests"] == 1


def test_keys_are_vllm_names() -> None:
    m = compute_metrics(RECORDS)
    for key in ("mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms",
                "mean_e2el_ms", "request_throughput", "output_throughput", "total_token_throughput", "completed",
                "total_input_tokens", "total_output_tokens", "duration", "request_goodput"):
        assert key in m
    assert set(m) == set(metric_names())


def test_tpot_uses_last_token_and_itl_pools_gaps() -> None:
    r = rec("x", "a", 0.0, [1.0, 1.1, 1.3, 1.6], 2.0, 8)  # finish after the last token
    assert r.tpot_s == pytest.approx(0.2)  # (1.6 - 1.0) / 3
    assert r.e2e_s == pytest.approx(2.0)
    assert np.allclose(r.itl_s, [0.1, 0.2, 0.3])


def test_record_round_trip_and_status_check() -> None:
    r = RECORDS[0]
    assert RequestRecord.from_dict(r.to_dict()) == r
    with pytest.raises(ValueError):
        rec("bad", "a", 0.0, [], None, 1, status="weird")
