"""`Tolerance`: how far a figure may move. '+15%' may grow by 15% (higher is worse), '-20%' may drop
by 20%, '15%' or '±15%' either way; a prediction's tolerance is symmetric."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from kvplan.validation import FieldIssue
from kvplan.validation import short_repr as _short

_PERCENT_RE = re.compile(r"^\s*(\+|-|±|\+/-)?\s*(\d+(?:\.\d+)?)\s*%\s*$")


class Tolerance(BaseModel):
    """'+15%': may grow by 15% (higher is worse); '-20%': may drop by 20%; '15%' or '±15%': either."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    percent: float = Field(ge=0)
    direction: Literal["up", "down", "both"]

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return v
        m = _PERCENT_RE.match(v) if isinstance(v, str) else None
        if not m:
            raise FieldIssue((), f"must be a percent string such as '+15%', '-20%' or '2%', got {_short(v)}")
        return {"percent": float(m.group(2)), "direction": {"+": "up", "-": "down"}.get(m.group(1) or "", "both")}

    @model_serializer
    def _text(self) -> str:
        return self.text

    @property
    def text(self) -> str:
        return f"{ {'up': '+', 'down': '-', 'both': ''}[self.direction]}{self.percent:g}%"

    def allows(self, reference: float, value: float) -> bool:
        """Whether `value` is within this tolerance of `reference` (a baseline or a prediction)."""
        slack = abs(reference) * self.percent / 100.0
        if self.direction == "up":
            return value <= reference + slack
        if self.direction == "down":
            return value >= reference - slack
        return abs(value - reference) <= slack
