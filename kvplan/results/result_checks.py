"""What a result file's numbers may be, checked when one is loaded (`load_result`) or built.

A result.json is read back by `kvplan report`, `gate` and `baseline`, and users edit or generate
them, so every number is checked where pydantic first sees it:
- anywhere in the file: finite and of magnitude at most 2^53 (JSON's exact-integer range; past it
  float arithmetic drops whole units and `float(10**400)` raises);
- a figure of the registry (metrics, per-class metrics, the prediction): absent (`null`), or a
  number >= 0; `true`/`false` only for the `bool` figures (slo_met). A string, a list or a
  mapping where a figure should be is malformed input (exit 2), never a "regression" (exit 1);
- requests: the fields of `RequestRecord`, with times and token counts >= 0.
Each check raises `FieldIssue` so the error line names the field path and the bad value.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvplan.results.figures import figure, prediction_key
from kvplan.validation import FieldIssue, first_error, short_repr

MAX_NUMBER = 2**53
_PREDICTION_KEYS = {prediction_key(n): n for n in ("duration",)}  # the prediction's own spellings of figures


def check_numbers(value: Any, where: tuple[str | int, ...] = ()) -> None:
    """Every number inside `value` (nested lists and mappings) finite and within ±2^53."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((path + (str(k),), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((path + (i,), v) for i, v in enumerate(item))
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            if (isinstance(item, float) and not math.isfinite(item)) or abs(item) > MAX_NUMBER:
                raise FieldIssue(path, f"must be a finite number within ±2^53, got {short_repr(item)}")


def check_figure(name: str, value: Any, path: tuple[str | int, ...]) -> None:
    """A registry figure: null, a number >= 0, or (for bool figures) true/false."""
    fig = figure(_PREDICTION_KEYS.get(name, name))
    if fig is None or value is None:
        return
    if isinstance(value, bool):
        if fig.unit != "bool":
            raise FieldIssue(path, f"must be a number ({fig.unit}), got {value!r}")
        return
    if not isinstance(value, (int, float)):
        raise FieldIssue(path, f"must be a number ({fig.unit}) or null, got {short_repr(value)}")
    if value < 0 and fig.unit != "bool":
        raise FieldIssue(path, f"must be >= 0 ({fig.unit}), got {short_repr(value)}")


def check_figures(values: Mapping[str, Any], where: tuple[str | int, ...]) -> None:
    for name, value in values.items():
        check_figure(str(name), value, where + (str(name),))


class _Request(BaseModel):
    """One entry of `requests` (RequestRecord.to_dict())."""

    model_config = ConfigDict(extra="forbid", strict=True)
    request_id: str
    class_name: str
    arrival_s: float = Field(ge=0)
    first_token_s: float | None = Field(ge=0)  # required, null when no token came (RequestRecord has no default)
    token_times_s: list[float]
    finish_s: float | None = Field(ge=0)
    prompt_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    status: Literal["ok", "error", "aborted"] = "ok"
    error: str | None = None
    is_warmup: bool = False
    num_preemptions: int = Field(default=0, ge=0)
    server_input_tokens: int | None = Field(default=None, ge=0)
    server_output_tokens: int | None = Field(default=None, ge=0)
    queue_s: float = Field(default=0.0, ge=0)


class _Workload(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    classes: list[dict[str, Any]] = Field(default_factory=list, max_length=10_000)


class _ScenarioCopy(BaseModel):
    """The result's copy of its scenario (`Scenario.to_dict()`), as far as reports read it: the
    sections are mappings. It is not re-validated as a Scenario: a result written under an older
    schema must still load."""

    model_config = ConfigDict(extra="allow", strict=True)
    name: str = Field(default="", max_length=200)
    model: Any = None  # a profile name, or a mapping {name, overrides}
    engine: dict[str, Any] = Field(default_factory=dict)
    workload: _Workload = Field(default_factory=_Workload)
    arrival: dict[str, Any] = Field(default_factory=dict)
    slo: dict[str, Any] = Field(default_factory=dict)
    gate: dict[str, Any] = Field(default_factory=dict)

    @field_validator("model")
    @classmethod
    def _model(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, (str, dict)):
            raise ValueError("must be a model name or a mapping {name, overrides}")
        return v


def check_scenario_copy(scenario: Any) -> None:
    try:
        _ScenarioCopy.model_validate(scenario)
    except ValidationError as exc:
        loc, text = first_error(exc, _ScenarioCopy)
        raise FieldIssue(("scenario", *loc), text) from None


def check_request_rows(requests: list[dict[str, Any]]) -> None:
    for i, entry in enumerate(requests):
        try:
            _Request.model_validate(entry)
        except ValidationError as exc:
            loc, text = first_error(exc, _Request)
            raise FieldIssue((i, *loc), text) from None
        if any(t < 0 for t in entry["token_times_s"]):
            raise FieldIssue((i, "token_times_s"), "times must be >= 0")


def check_timeline(samples: Any, where: tuple[str | int, ...]) -> None:
    """The prediction's timeline: a list of mappings of numbers (or null)."""
    if not isinstance(samples, list):
        raise FieldIssue(where, f"must be a list, got {short_repr(samples)}")
    for i, sample in enumerate(samples):
        if not isinstance(sample, dict) or not all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in sample.values()
        ):
            raise FieldIssue(where + (i,), f"must be a mapping of numbers, got {short_repr(sample)}")


def check_result_data(data: Mapping[str, Any]) -> None:
    """Every check above on a result file's parsed JSON (before the schema's own checks): raises
    `FieldIssue` with the path of the first bad value."""
    check_numbers(dict(data))
    if "scenario" in data:
        check_scenario_copy(data["scenario"])
    for key in ("metrics", "prediction", "per_class"):
        if not isinstance(data.get(key, {}), dict):
            raise FieldIssue((key,), f"must be a mapping, got {short_repr(data.get(key))}")
    check_figures(data.get("metrics", {}), ("metrics",))
    check_figures(data.get("prediction", {}), ("prediction",))
    if "timeline" in data.get("prediction", {}):
        check_timeline(data["prediction"]["timeline"], ("prediction", "timeline"))
    for name, group in data.get("per_class", {}).items():
        if not isinstance(group, dict):
            raise FieldIssue(("per_class", str(name)), f"must be a mapping, got {short_repr(group)}")
        check_figures(group, ("per_class", str(name)))
    requests = data.get("requests", [])
    if not isinstance(requests, list):
        raise FieldIssue(("requests",), f"must be a list, got {short_repr(requests)}")
    check_request_rows(requests)
