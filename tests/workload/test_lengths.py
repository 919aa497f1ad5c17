"""Length specs: the fields each distribution needs, and draws clipped and shaped as documented."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from kvplan.workload.lengths import LengthSpec, sample_length


def test_a_number_is_a_fixed_length() -> None:
    spec = LengthSpec.model_validate(128)
    assert (spec.dist, spec.lower_tokens, spec.upper_tokens) == ("fixed", 128, 128)
    assert sample_length(spec, np.random.default_rng(0)) == 128


@pytest.mark.parametrize("data", [0, 1.5, True, {"dist": "uniform", "min": 5}, {"dist": "normal", "mean": 5},
                                  {"dist": "fixed", "mean": 5, "std": 1}, {"dist": "uniform", "min": 9, "max": 3}])
def test_incomplete_or_contradictory_specs_are_refused(data: object) -> None:
    with pytest.raises(ValidationError):
        LengthSpec.model_validate(data)


def test_uniform_covers_its_bounds_inclusive() -> None:
    rng = np.random.default_rng(0)
    draws = {sample_length(LengthSpec(dist="uniform", min=3, max=6), rng) for _ in range(400)}
    assert draws == {3, 4, 5, 6}


def test_draws_are_clipped_to_the_callers_bounds() -> None:
    spec = LengthSpec(dist="normal", mean=100, std=80, min=10, max=300)
    rng = np.random.default_rng(2)
    draws = [sample_length(spec, rng, lower=50, upper=120) for _ in range(2000)]
    assert min(draws) == 50 and max(draws) == 120


def test_lognormal_mean_and_std_are_of_the_length() -> None:
    spec = LengthSpec(dist="lognormal", mean=500, std=200)
    rng = np.random.Generator(np.random.PCG64(0))
    draws = np.array([sample_length(spec, rng) for _ in range(20000)])
    assert draws.mean() == pytest.approx(500, rel=0.02) and draws.std() == pytest.approx(200, rel=0.05)
