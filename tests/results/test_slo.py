"""`Slo` and `vllm bench serve`'s `--goodput KEY:MS` flags, by hand: which limits a request must
meet, and one readable error per bad value naming the flag and the choices."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvplan.errors import KvplanError
from kvplan.results.slo import GOODPUT_METRICS, Slo, goodput_ms, parse_goodput, plan_slo


def test_only_the_limits_given_count() -> None:
    assert Slo().limits_ms == {}
    assert Slo(ttft_ms=500, e2e_ms=9000).limits_ms == {"ttft": 500.0, "e2e": 9000.0}
    assert Slo(ttft_ms=1, tpot_ms=2, itl_ms=3, e2e_ms=4).limits_ms == {"ttft": 1, "tpot": 2, "itl": 3, "e2e": 4}
    assert Slo().percentile == 99.0


@pytest.mark.parametrize("bad", [{"ttft_ms": 0}, {"tpot_ms": -1}, {"percentile": 0}, {"percentile": 100.5}])
def test_limits_are_positive_and_the_percentile_in_range(bad: dict) -> None:
    with pytest.raises(ValidationError):
        Slo(**bad)


def test_plan_slo_names_the_flags() -> None:
    assert plan_slo(500, 50, 90) == Slo(ttft_ms=500, tpot_ms=50, percentile=90)
    with pytest.raises(KvplanError, match="--slo-ttft-ms 0 and --slo-tpot-ms 50"):
        plan_slo(0, 50)
    with pytest.raises(KvplanError, match="--slo-percentile must be in \\(0, 100\\], got 101"):
        plan_slo(500, 50, 101)
    with pytest.raises(KvplanError, match="SLOs must be positive"):
        plan_slo(float("nan"), 50)


def test_goodput_pairs_as_vllm_takes_them() -> None:
    assert GOODPUT_METRICS == ("ttft", "tpot", "e2el")  # vllm bench serve's keys
    assert parse_goodput(["ttft:500", "tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    assert parse_goodput(["ttft:500,e2el:8000"]) == {"ttft": 500.0, "e2el": 8000.0}
    assert parse_goodput(["ttft:0"]) == {"ttft": 0.0}  # accepted: no request meets it
    assert parse_goodput([]) == {}


@pytest.mark.parametrize(("items", "message"), [
    (["itl:5"], "--goodput 'itl': choose from ttft, tpot, e2el"),
    (["ttft"], "--goodput takes KEY:MILLISECONDS pairs"),
    ([":500"], "--goodput takes KEY:MILLISECONDS pairs"),
    (["ttft:fast"], "the value is milliseconds, a number"),
    (["ttft:-1"], "a non-negative number of milliseconds"),
    (["ttft:inf"], "a non-negative number of milliseconds"),
])
def test_bad_goodput_is_one_line_naming_it(items: list[str], message: str) -> None:
    with pytest.raises(KvplanError, match=message.replace("(", "\\(").replace(")", "\\)")):
        parse_goodput(items)


def test_goodput_ms_reads_one_value() -> None:
    assert goodput_ms("e2el", "1.5") == 1.5
