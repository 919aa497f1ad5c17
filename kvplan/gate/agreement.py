"""How far each measured figure landed from its prediction, judged against a tolerance: one row per
figure, and for timing figures a second row with the prediction rescaled by the machine speed the
run measured (`normalized_error_pct`).

Every row carries a tolerance: the scenario's `gate.prediction` one where it names the figure,
else this module's default for the figure's kind (pool layout exact, peaks 5%, schedule 10%, raw
timing 50%, timing at measured speed 25%: the gate's normalized bound). The judgement is made on
the error as shown, (predicted - measured) / measured, the convention of `kvplan stress` and of
`normalized_error_pct`, so a row's colour always agrees with its printed number. An interrupted
run measured part of the workload the prediction covers: only the pool layout, which does not
depend on how far the run got, is judged; the rest reads "incomplete".
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kvplan.results.figures import FIGURES, figure_value, prediction_key, unit_of
from kvplan.results.result import RunResult

Kind = Literal["memory", "schedule", "timing", "timing at measured speed"]
Status = Literal["pass", "miss", "not measured", "incomplete", "not predicted"]

LAYOUT = ("num_gpu_blocks", "kv_pool_bytes", "bytes_per_block")  # fixed before the first request
PEAKS = ("peak_kv_bytes", "peak_kv_blocks")
TIMING_UNITS = ("ms", "s", "tok/s", "req/s")
DEFAULT_TOLERANCE_PCT: dict[str, float] = {"layout": 0.0, "peak": 5.0, "schedule": 10.0, "timing": 50.0,
                                           "timing at measured speed": 25.0}
SKIP = ("timeline", "cost_model", "cost_model_source", "allocator")
AT_SPEED = " at measured speed"


@dataclass(frozen=True)
class Agreement:
    """One figure, predicted vs measured, with its tolerance and the judgement."""

    key: str  # the figure's name (for a rescaled row, the figure it rescales)
    kind: Kind
    predicted: float | None  # for a rescaled row: the prediction x the machine's speed
    measured: float | None
    error_pct: float | None  # (predicted - measured) / measured
    tolerance_pct: float
    tolerance_from: str  # "scenario gate" or "report default"
    status: Status

    @property
    def label(self) -> str:
        return self.key + (AT_SPEED if self.kind == "timing at measured speed" else "")

    @property
    def unit(self) -> str:
        return unit_of(self.key)

    @property
    def judged(self) -> bool:
        return self.status in ("pass", "miss")


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """The prediction's error, (predicted - measured) / measured in percent, as `kvplan stress`
    prints it; None when undefined (0 of 0 is 0%)."""
    if predicted is None or measured is None:
        return None
    if measured == 0:
        return 0.0 if predicted == 0 else None
    if not (math.isfinite(predicted) and math.isfinite(measured)):
        return None
    return 100.0 * (predicted - measured) / abs(measured)


def kind_of(key: str) -> Kind:
    unit = unit_of(key)
    if key in LAYOUT or key in PEAKS or unit == "bytes":
        return "memory"
    return "timing" if unit in TIMING_UNITS else "schedule"


def default_tolerance_pct(key: str, kind: Kind) -> float:
    if key in LAYOUT:
        return DEFAULT_TOLERANCE_PCT["layout"]
    if kind == "memory":
        return DEFAULT_TOLERANCE_PCT["peak"]
    return DEFAULT_TOLERANCE_PCT[kind]


def _scenario_tolerances(result: RunResult) -> dict[str, float]:
    """The scenario's gate.prediction percents by figure name (p50_X read as median_X)."""
    gate = (result.scenario.get("gate") or {}).get("prediction") or {}
    out = {}
    for key, text in gate.items():
        try:
            percent = float(str(text).strip().lstrip("±+-").rstrip("%"))
        except ValueError:
            continue  # a malformed old result: fall back to the default rather than refuse to report
        out[("median_" + key.removeprefix("p50_")) if key.startswith("p50_") else key] = percent
    return out


def judge(predicted: float | None, measured: float | None, tolerance_pct: float, complete: bool,
          depends_on_run: bool) -> tuple[float | None, Status]:
    """(error %, status). A prediction of something that did not happen (measured 0, predicted
    more) is a miss with no finite error."""
    if predicted is None:
        return None, "not predicted"
    if not complete and depends_on_run:
        return None, "incomplete"
    if measured is None:
        return None, "not measured"
    err = error_pct(predicted, measured)
    if err is None:  # measured 0, predicted not
        return None, "miss"
    return err, "pass" if abs(err) <= tolerance_pct + 1e-9 else "miss"


def _keys(result: RunResult, tolerances: Mapping[str, float]) -> list[str]:
    keys = [f.name for f in FIGURES.values() if f.predicted]
    keys += [k for k in result.prediction if k not in keys and k not in SKIP and k not in
             {f.prediction_key for f in FIGURES.values() if f.prediction_key}
             and figure_value(result.prediction, k) is not None and figure_value(result.metrics, k) is not None]
    return keys + [k for k in tolerances if k not in keys]


def agreements(result: RunResult) -> list[Agreement]:
    """Every predicted figure's row, in the order memory, schedule, timing, timing at measured speed."""
    tolerances = _scenario_tolerances(result)
    rows: list[Agreement] = []
    for key in _keys(result, tolerances):
        p = _finite(figure_value(result.prediction, prediction_key(key)))
        m = _finite(figure_value(result.metrics, key))
        if p is None and m is None:
            continue
        kind = kind_of(key)
        tol = tolerances.get(key, default_tolerance_pct(key, kind))
        err, status = judge(p, m, tol, result.complete, key not in LAYOUT)
        rows.append(
            Agreement(key, kind, p, m, err, tol, "scenario gate" if key in tolerances else "report default", status)
        )
    rows += _at_measured_speed(result, rows)
    order = {"memory": 0, "schedule": 1, "timing": 2, "timing at measured speed": 3}
    return sorted(rows, key=lambda r: order[r.kind])  # stable: the registry's order within a kind


def _at_measured_speed(result: RunResult, rows: list[Agreement]) -> list[Agreement]:
    """The timing rows again, the prediction rescaled by the measured machine speed (times x
    ratio, rates / ratio), as `normalized_error_pct` holds them."""
    ratio = _finite(figure_value(result.metrics, "machine_speed_ratio"))
    if not ratio or ratio <= 0:
        return []
    out = []
    tol = DEFAULT_TOLERANCE_PCT["timing at measured speed"]
    for row in rows:
        if row.kind != "timing" or row.predicted is None:
            continue
        scaled = row.predicted / ratio if row.unit.endswith("/s") else row.predicted * ratio
        err, status = judge(scaled, row.measured, tol, result.complete, True)
        stored = result.normalized_error_pct.get(row.key)
        if status in ("pass", "miss") and stored is not None and math.isfinite(stored):
            err = stored  # the number result.json holds; the same computation
            status = "pass" if abs(err) <= tol + 1e-9 else "miss"
        out.append(
            Agreement(row.key, "timing at measured speed", scaled, row.measured, err, tol, "report default", status)
        )
    return out


def summary(rows: list[Agreement]) -> dict[str, Any]:
    """Per kind: judged rows, passes and misses (the verdict paragraph reads this)."""
    out: dict[str, Any] = {}
    for kind in ("memory", "schedule", "timing", "timing at measured speed"):
        judged = [r for r in rows if r.kind == kind and r.judged]
        out[kind] = {"judged": judged, "passed": [r for r in judged if r.status == "pass"],
                     "missed": [r for r in judged if r.status == "miss"]}
    return out
