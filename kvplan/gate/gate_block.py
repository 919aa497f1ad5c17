"""`Gate`: a scenario's `gate:` block, what the CI gate checks: figures that must equal the baseline
(`exact`), figures that may move by a signed tolerance (`relative`), and figures measured within a
symmetric tolerance of their prediction (`prediction`). Every name is a figure of the registry
(`results.figures`); a renamed figure is read under its new name."""
from __future__ import annotations

import difflib
import functools
from typing import Any

from pydantic import Field, field_validator, model_validator

from kvplan.gate.tolerance import Tolerance
from kvplan.results.figures import RENAMED_FIGURES, metric_names, names
from kvplan.validation import FieldIssue, StrictModel
from kvplan.validation import short_repr as _short


@functools.cache
def _gate_keys() -> tuple[str, ...]:
    return tuple(sorted({*metric_names(), *names("memory"), *names("machine"), *names("normalized")}))


def known_gate_keys() -> list[str]:
    """Every figure a gate may name (the registry is fixed: computed once, checked per key)."""
    return list(_gate_keys())


def _check_gate_key(where: tuple[str | int, ...], key: str) -> None:
    if key not in _gate_keys():
        known = known_gate_keys()
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        hint = (
            f"did you mean: {', '.join(close)}?"
            if close
            else f"choices include: {', '.join(names('memory'))}, p99_itl_ms, mean_ttft_ms, ..."
        )
        raise FieldIssue(where, f"unknown metric {_short(key)}; {hint}")


class Gate(StrictModel):
    exact: list[str] = Field(default_factory=list)  # must equal the baseline exactly (deterministic figures)
    relative: dict[str, Tolerance] = Field(default_factory=dict)  # vs the baseline
    prediction: dict[str, Tolerance] = Field(default_factory=dict)  # measured vs predicted, symmetric

    @field_validator("exact", mode="before")
    @classmethod
    def _renamed_exact(cls, v: Any) -> Any:
        """Scenarios (and results' copies of them) written before a figure's rename gate its new name."""
        return [RENAMED_FIGURES.get(k, k) if isinstance(k, str) else k for k in v] if isinstance(v, list) else v

    @field_validator("relative", "prediction", mode="before")
    @classmethod
    def _renamed(cls, v: Any) -> Any:
        return (
            {RENAMED_FIGURES.get(k, k) if isinstance(k, str) else k: t for k, t in v.items()}
            if isinstance(v, dict)
            else v
        )

    @model_validator(mode="after")
    def _check(self) -> Gate:
        for i, key in enumerate(self.exact):
            _check_gate_key(("exact", i), key)
        for key in self.relative:
            _check_gate_key(("relative", key), key)
        for key, tol in self.prediction.items():
            _check_gate_key(("prediction", key), key)
            if tol.direction != "both":
                raise FieldIssue(
                    ("prediction", key),
                    f"prediction tolerances are symmetric: write '{tol.percent:g}%', not {tol.text!r}",
                )
        return self
