"""`Tolerance`: the percent strings a scenario and a gate take, and which values each allows,
worked by hand at the edges (exactly at the limit is allowed, a hair past it is not)."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvplan.gate.tolerance import Tolerance


@pytest.mark.parametrize(("text", "percent", "direction", "printed"), [
    ("+15%", 15.0, "up", "+15%"),
    ("-20%", 20.0, "down", "-20%"),
    ("15%", 15.0, "both", "15%"),
    ("±2.5%", 2.5, "both", "2.5%"),
    ("+/- 10 %", 10.0, "both", "10%"),
    (" 0% ", 0.0, "both", "0%"),
])
def test_percent_strings_parse_and_print_back(text: str, percent: float, direction: str, printed: str) -> None:
    tol = Tolerance.model_validate(text)
    assert (tol.percent, tol.direction, tol.text) == (percent, direction, printed)
    assert tol.model_dump() == printed and Tolerance.model_validate(tol.model_dump()) == tol


@pytest.mark.parametrize("bad", ["15", "fifteen%", "++15%", "15%%", "-", 15, None, "1e2%"])
def test_anything_else_is_refused_naming_the_forms(bad: object) -> None:
    with pytest.raises(ValidationError, match="percent string such as '\\+15%'"):
        Tolerance.model_validate(bad)


def test_up_allows_a_drop_and_up_to_the_limit_of_growth() -> None:
    tol = Tolerance.model_validate("+10%")
    assert tol.allows(200.0, 220.0) and not tol.allows(200.0, 220.001)  # 10% of 200 = 20
    assert tol.allows(200.0, 1.0)  # lower is never worse


def test_down_allows_growth_and_down_to_the_limit_of_a_drop() -> None:
    tol = Tolerance.model_validate("-20%")
    assert tol.allows(50.0, 40.0) and not tol.allows(50.0, 39.999)  # 20% of 50 = 10
    assert tol.allows(50.0, 1e9)


def test_both_ways_is_symmetric_and_scales_with_a_negative_reference() -> None:
    tol = Tolerance.model_validate("5%")
    assert tol.allows(100.0, 95.0) and tol.allows(100.0, 105.0)
    assert not tol.allows(100.0, 94.9) and not tol.allows(100.0, 105.1)
    assert tol.allows(-100.0, -104.0) and not tol.allows(-100.0, -106.0)  # slack from |reference|
    assert Tolerance.model_validate("0%").allows(3.0, 3.0) and not Tolerance.model_validate("0%").allows(3.0, 3.0001)
