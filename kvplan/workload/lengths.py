"""`LengthSpec`: tokens per request, fixed, uniform [min, max], normal or lognormal (mean, std),
rounded and clipped; lognormal's mean and std are those of the token count itself, not of its
logarithm. `sample_length` draws one."""
from __future__ import annotations

import math
from typing import Any, Literal

from numpy.random import Generator
from pydantic import Field, model_validator

from kvplan.validation import FieldIssue, StrictModel, short_repr
from kvplan.workload.limits import MAX_TOKENS

_NEEDS = {"fixed": ("mean",), "uniform": ("min", "max"), "normal": ("mean", "std"), "lognormal": ("mean", "std")}
_UNUSED = {"fixed": ("std", "min", "max"), "uniform": ("mean", "std")}
_SHAPE = "a token count or a mapping {dist, mean, std, min, max}"


class LengthSpec(StrictModel):
    dist: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    mean: float | None = Field(default=None, gt=0, le=MAX_TOKENS)
    std: float | None = Field(default=None, gt=0, le=MAX_TOKENS)
    min: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    max: int | None = Field(default=None, gt=0, le=MAX_TOKENS)

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise FieldIssue((), f"must be {_SHAPE}, got {v!r}")
        if isinstance(v, (int, float)):
            if not (isinstance(v, int) or (math.isfinite(v) and v.is_integer())) or not 0 < v <= MAX_TOKENS:
                raise FieldIssue((), f"must be a whole number of tokens in 1..{MAX_TOKENS:,}, got {short_repr(v)}")
            return {"dist": "fixed", "mean": int(v)}
        if not isinstance(v, (dict, LengthSpec)):
            raise FieldIssue((), f"must be {_SHAPE}, got {short_repr(v)}")
        return v

    @model_validator(mode="after")
    def _check(self) -> LengthSpec:
        for key in _NEEDS[self.dist]:
            if getattr(self, key) is None:
                raise FieldIssue((key,), f"is required for dist {self.dist}")
        for key in _UNUSED.get(self.dist, ()):
            if getattr(self, key) is not None:
                raise FieldIssue((key,), f"has no effect for dist {self.dist} (got {getattr(self, key)!r}); remove it")
        if self.dist == "fixed" and self.mean != int(self.mean or 0):
            raise FieldIssue(("mean",), f"must be a whole number of tokens for dist fixed, got {self.mean!r}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise FieldIssue(("min",), f"min {self.min} is larger than max {self.max}")
        if self.mean is not None and self.dist != "fixed":
            if (self.min is not None and self.mean < self.min) or (self.max is not None and self.mean > self.max):
                raise FieldIssue(("mean",), f"mean {self.mean:g} is outside [min {self.min}, max {self.max}]")
        return self

    @property
    def lower_tokens(self) -> int:
        """The smallest length a draw can have (before the shared-prefix floor)."""
        return int(self.mean or 0) if self.dist == "fixed" else (self.min or 1)

    @property
    def upper_tokens(self) -> int | None:
        return int(self.mean or 0) if self.dist == "fixed" else self.max


def sample_length(spec: LengthSpec, rng: Generator, lower: int = 1, upper: int | None = None) -> int:
    """One draw, rounded and clipped to [min, max] and to [lower, upper] (the fields each
    distribution needs are set: LengthSpec checks them)."""
    mean, std = float(spec.mean or 0.0), float(spec.std or 0.0)
    if spec.dist == "fixed":
        value = mean
    elif spec.dist == "uniform":
        value = float(rng.integers(spec.min or 1, (spec.max or 1) + 1))
    elif spec.dist == "normal":
        value = float(rng.normal(mean, std))
    else:  # lognormal with the given mean and std of the length itself
        sigma2 = math.log1p((std / mean) ** 2)
        value = float(rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2)))
    lo = max(spec.min or 1, lower)
    hi = min(spec.max if spec.max is not None else math.inf, upper if upper is not None else math.inf)
    return int(min(max(round(value), lo), hi))
