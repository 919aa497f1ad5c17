"""The CI gate's checks: a result against a stored baseline and against its own prediction.

Kinds of check, all from the result's scenario `gate:` block (flags may override):
- `exact`: deterministic figures (pool blocks, peak KV bytes, preemptions, steps, tokens per
  step) must equal the baseline's; closed-loop scenarios repeat them to the byte, so any change
  is a real change.
- `normalized`: latency with the CPU waits taken out, in units of a reference kernel timed in the
  same run (figures group "normalized"), may move by a signed tolerance (`+25%` may grow 25%).
  A busy or slower machine moves latency and yardstick together; a slower engine only latency.
- `raw`: wall-clock latency and throughput, by a (wide) signed tolerance. When the run measured
  the machine busier or slower than the baseline's (CPU waits, reference kernel) and normalized
  checks exist, a raw miss is reported but not failed: the machine, not the code, moved it.
- `relative`: any other figure by a signed tolerance.
- `prediction`: measured within a symmetric tolerance of what the planner predicted first.
Plus one `health` check that always runs: no more failed requests than the baseline had, because
a run whose requests error out can look faster than a good one.

A figure missing from both sides (CUDA figures on a CPU run, no preemption onset when nothing was
preempted) passes with a note; missing from one side only fails: a gate never passes silently on
a figure that vanished. Bad input (unreadable files, different scenarios or allocators, an
interrupted run) is a `KvplanError`: exit 2, distinct from a regression's exit 1.
"""
from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from kvplan.errors import KvplanError
from kvplan.gate.gate_block import Gate, known_gate_keys
from kvplan.gate.tolerance import Tolerance
from kvplan.results.figures import default_gate, figure, figure_value, unit_of
from kvplan.results.result import RunResult
from kvplan.validation import format_validation_error

CheckKind = Literal["exact", "normalized", "raw", "relative", "prediction", "health"]
CONTENDED_WAIT_SHARE = 0.10  # more of the steps' time waiting for a CPU than the baseline's: contended
CONTENDED_REFERENCE = 1.25  # the reference kernel's CPU time against the baseline's: a slower machine
RAW_GROUPS = ("latency", "throughput")
EXACT = "exact"  # the word a --tolerance flag uses for an exact check

@dataclass(frozen=True)
class GateCheck:
    metric: str
    baseline: float | None  # the reference: the baseline's value, or the prediction for kind "prediction"
    current: float | None
    delta: float | None  # current - baseline in the metric's unit; a prediction check: predicted - measured
    limit: str  # "exact", "+15%", "±2% of measured", "<= baseline"
    passed: bool
    kind: CheckKind
    note: str = ""

    @property
    def delta_formula(self) -> str:
        """How `delta_pct` is signed, in words: one convention for every command and file."""
        return "(predicted - measured) / measured" if self.kind == "prediction" else "(current - baseline) / baseline"

    @property
    def delta_pct(self) -> float | None:
        """% of the reference; a prediction check's is the prediction's error, (predicted - measured) /
        measured, signed as the stress table, the report's plot and `predict --vllm-result` sign it."""
        reference = self.current if self.kind == "prediction" else self.baseline
        if self.delta is None or reference is None:
            return None
        if reference == 0:
            return 0.0 if self.delta == 0 else None
        return 100.0 * self.delta / abs(reference)


@dataclass(frozen=True)
class GateVerdict:
    scenario: str
    allocator: str
    checks: tuple[GateCheck, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> tuple[GateCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def _delta(reference: float | None, current: float | None) -> float | None:
    return None if reference is None or current is None else current - reference


def _missing(kind: CheckKind, metric: str, reference: float | None, current: float | None, limit: str,
             ref_word: str) -> GateCheck | None:
    """The check's outcome when a side has no value, else None (compare normally)."""
    if reference is None and current is None:
        return GateCheck(metric, None, None, None, limit, True, kind, f"not measured in either {ref_word} or result")
    if reference is None:
        return GateCheck(metric, None, current, None, limit, False, kind, f"missing from the {ref_word}")
    if current is None:
        return GateCheck(metric, reference, None, None, limit, False, kind, "missing from the result")
    return None


def check_exact(metric: str, baseline: float | None, current: float | None) -> GateCheck:
    missing = _missing("exact", metric, baseline, current, EXACT, "baseline")
    if missing is not None:
        return missing
    return GateCheck(metric, baseline, current, _delta(baseline, current), EXACT, baseline == current, "exact")


def relative_kind(metric: str) -> CheckKind:
    f = figure(metric)
    if f is not None and f.group == "normalized":
        return "normalized"
    if f is not None and f.group in RAW_GROUPS and f.unit in ("ms", "s", "tok/s", "req/s"):
        return "raw"
    return "relative"


def check_relative(metric: str, tol: Tolerance, baseline: float | None, current: float | None,
                   excuse: str | None = None) -> GateCheck:
    """`excuse`: why a raw miss is not failed (the machine was contended), or None to judge it."""
    kind = relative_kind(metric)
    missing = _missing(kind, metric, baseline, current, tol.text, "baseline")
    if missing is not None:
        return missing
    assert baseline is not None and current is not None
    ok = tol.allows(baseline, current)
    if not ok and kind == "raw" and excuse:
        return GateCheck(metric, baseline, current, _delta(baseline, current), tol.text, True, kind,
                         f"beyond the limit, not failed: {excuse}")
    return GateCheck(metric, baseline, current, _delta(baseline, current), tol.text, ok, kind)


def contention(baseline: RunResult, current: RunResult) -> str | None:
    """Why the current run's wall-clock latency cannot be held against the baseline's (its machine
    was busier or slower, measured apart from the engine), or None."""
    reasons = []
    wait, b_wait = (
        figure_value(current.metrics, "cpu_wait_share"),
        figure_value(baseline.metrics, "cpu_wait_share") or 0.0,
    )
    if wait is not None and wait - b_wait > CONTENDED_WAIT_SHARE:
        reasons.append(f"the engine waited for a CPU {100 * wait:.0f}% of its step time (baseline {100 * b_wait:.0f}%)")
    ref, b_ref = (
        figure_value(current.metrics, "reference_kernel_cpu_ms"),
        figure_value(baseline.metrics, "reference_kernel_cpu_ms"),
    )
    if ref and b_ref and ref / b_ref > CONTENDED_REFERENCE:
        reasons.append(f"the reference kernel took {ref / b_ref:.2f}x the baseline's CPU time")
    return "machine contended: " + "; ".join(reasons) if reasons else None


def check_prediction(metric: str, tol: Tolerance, predicted: float | None, measured: float | None,
                     at_measured_speed_pct: float | None = None) -> GateCheck:
    """Measured within `tol` of predicted. `at_measured_speed_pct`: the prediction's error once re-simulated
    at the machine speed this run measured (`normalized_error_pct`); a wall-clock miss that is within
    the tolerance there is the machine's speed, not the model's error, and is not failed: the report
    names the same cause from the same figure."""
    limit = f"±{tol.percent:g}% of measured"
    missing = _missing("prediction", metric, predicted, measured, limit, "prediction")
    if missing is not None:
        return missing
    assert predicted is not None and measured is not None
    # delta: predicted - measured (the prediction's error), not measured - predicted
    ok = tol.allows(measured, predicted)
    if not ok and at_measured_speed_pct is not None and abs(at_measured_speed_pct) <= tol.percent:
        return GateCheck(
            metric,
            predicted,
            measured,
            _delta(measured, predicted),
            limit,
            True,
            "prediction",
            f"beyond the limit on the wall clock, {at_measured_speed_pct:+.1f}% at the measured machine speed: "
            "the machine's speed, not the model (as the report says)",
        )
    return GateCheck(metric, predicted, measured, _delta(measured, predicted), limit, ok, "prediction")


# --- tolerances -------------------------------------------------------------------------------
def gate_of(result: RunResult, where: str) -> Gate:
    """The stored scenario's `gate:` block, schema-checked (the rest of the scenario, a model that
    may be a local path this machine does not have, is not the gate's to read)."""
    block = result.scenario.get("gate", {})
    try:
        return Gate.model_validate(block)
    except ValidationError as exc:
        raise KvplanError(format_validation_error(f"{where}: scenario.gate", exc, Gate)) from None


def _known(name: str, flag: str) -> str:
    known = known_gate_keys()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        raise KvplanError(
            f"{flag} {name!r}: unknown metric" + (f"; did you mean: {', '.join(close)}?" if close else "")
        )
    return name


def parse_overrides(items: Sequence[str], flag: str, *, allow_exact: bool) -> dict[str, Tolerance | str]:
    """`NAME=+15%` (or `NAME=exact`) flags -> {name: Tolerance or "exact"}."""
    out: dict[str, Tolerance | str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise KvplanError(
                f"{flag} takes NAME=TOLERANCE such as p99_itl_ms=+15%"
                + (" or peak_kv_bytes=exact" if allow_exact else "")
                + f", got {item!r}"
            )
        _known(name, flag)
        if allow_exact and value.lower() == EXACT:
            out[name] = EXACT
            continue
        try:
            tol = Tolerance.model_validate(value)
        except (ValidationError, ValueError):
            raise KvplanError(f"{flag} {name}: {value!r} is not a tolerance such as '+15%', '-20%' or '2%'") from None
        _check_sign(name, tol, value, flag)
        if not allow_exact and tol.direction != "both":
            raise KvplanError(
                f"{flag} {name}: prediction tolerances are symmetric: write '{tol.percent:g}%', not {value!r}"
            )
        out[name] = tol
    return out


_WORSE_WHEN_HIGHER = ("ms", "s")  # latencies and durations
_WORSE_WHEN_LOWER = ("tok/s", "req/s")  # throughputs


def _check_sign(name: str, tol: Tolerance, value: str, flag: str) -> None:
    """A signed tolerance names the direction that is worse; refuse one that cannot mean anything:
    a signed 0% (write 'exact' or '0%') or a sign that would let the figure worsen without limit
    (`p99_itl_ms=-10%` lets the latency grow by any amount)."""
    sign = {"up": "+", "down": "-"}.get(tol.direction)
    if sign is None:
        return
    if tol.percent == 0:
        raise KvplanError(f"{flag} {name}: {value!r} is a signed zero; write '{name}=exact' or '{name}=0%'")
    unit = unit_of(name)
    worse = "+" if unit in _WORSE_WHEN_HIGHER else "-" if unit in _WORSE_WHEN_LOWER else None
    if worse is not None and sign != worse:
        word = "higher" if worse == "+" else "lower"
        raise KvplanError(f"{flag} {name}: {value!r} would let {name} get worse without limit ({word} is worse); "
                          f"write '{worse}{tol.percent:g}%' or '{tol.percent:g}%'")


@dataclass(frozen=True)
class GatePlan:
    """What to check: the scenario's gate block with flag overrides applied."""

    exact: tuple[str, ...]
    relative: dict[str, Tolerance]
    prediction: dict[str, Tolerance]
    notes: tuple[str, ...] = ()


def gate_plan(gate: Gate, tolerance: Sequence[str] = (), prediction_tolerance: Sequence[str] = ()) -> GatePlan:
    exact, relative, notes = list(gate.exact), dict(gate.relative), []
    if not exact and not relative:
        default_exact, default_relative = default_gate()  # the registry's memory-exact, latency-loose defaults
        exact, relative = list(default_exact), {k: Tolerance.model_validate(v) for k, v in default_relative.items()}
        notes.append("the scenario's gate block compares nothing with the baseline; using the default checks")
    for name, tol in parse_overrides(tolerance, "--tolerance", allow_exact=True).items():
        relative.pop(name, None)
        exact = [e for e in exact if e != name]
        if tol == EXACT:
            exact.append(name)
        else:
            assert isinstance(tol, Tolerance)
            relative[name] = tol
    prediction = dict(gate.prediction)
    prediction.update(
        {
            k: v
            for k, v in parse_overrides(prediction_tolerance, "--prediction-tolerance", allow_exact=False).items()
            if isinstance(v, Tolerance)
        }
    )
    return GatePlan(tuple(exact), relative, prediction, tuple(notes))


# --- the gate ---------------------------------------------------------------------------------
def _settings_diff(base: dict[str, Any], cur: dict[str, Any], prefix: str = "") -> list[str]:
    keys = sorted(set(base) | set(cur))
    out: list[str] = []
    for k in keys:
        if k == "gate":  # loosening or tightening the gate is not a different experiment
            continue
        b, c = base.get(k), cur.get(k)
        if isinstance(b, dict) and isinstance(c, dict):
            out += _settings_diff(b, c, f"{prefix}{k}.")
        elif b != c:
            out.append(f"{prefix}{k}")
    return out


def check_comparable(baseline: RunResult, current: RunResult, baseline_where: str = "baseline",
                     result_where: str = "result") -> list[str]:
    """Refuse (exit 2) pairs that cannot be compared; return warnings for pairs that can."""
    if baseline.scenario_name != current.scenario_name:
        raise KvplanError(f"{result_where} is scenario {current.scenario_name!r} but {baseline_where} is "
                          f"{baseline.scenario_name!r}: gate a result against the baseline of its own scenario")
    if baseline.allocator != current.allocator:
        raise KvplanError(f"{result_where} used the {current.allocator} allocator but {baseline_where} the "
                          f"{baseline.allocator} allocator: they measure different things")
    for where, r in ((result_where, current), (baseline_where, baseline)):
        if not r.complete:
            raise KvplanError(f"{where} is incomplete (interrupted or failed run); rerun it before gating")
    diff = _settings_diff(baseline.scenario, current.scenario)
    notes = (
        [f"scenario settings differ from the baseline's: {', '.join(diff[:6])}{' ...' if len(diff) > 6 else ''}"]
        if diff
        else []
    )
    threads = (baseline.environment.engine_threads, current.environment.engine_threads)
    if None not in threads and threads[0] != threads[1]:
        notes.append(
            f"the engine ran {threads[1]} intra-op threads, the baseline {threads[0]}: normalized latency compares "
            "different configurations (pin engine.num_threads or --threads)"
        )
    return notes


def run_gate(baseline: RunResult, current: RunResult, *, tolerance: Sequence[str] = (),
             prediction_tolerance: Sequence[str] = (), baseline_where: str = "baseline",
             result_where: str = "result") -> GateVerdict:
    """Every check of the gate; raises `KvplanError` for inputs that cannot be compared."""
    warnings = check_comparable(baseline, current, baseline_where, result_where)
    plan = gate_plan(gate_of(current, result_where), tolerance, prediction_tolerance)
    checks: list[GateCheck] = []
    for name in plan.exact:
        checks.append(check_exact(name, figure_value(baseline.metrics, name), figure_value(current.metrics, name)))
    normalized = [
        n
        for n in plan.relative
        if relative_kind(n) == "normalized"
        and figure_value(current.metrics, n) is not None
        and figure_value(baseline.metrics, n) is not None
    ]
    excuse = contention(baseline, current) if normalized else None
    for name, tol in plan.relative.items():
        checks.append(
            check_relative(name, tol, figure_value(baseline.metrics, name), figure_value(current.metrics, name), excuse)
        )
    for name, tol in plan.prediction.items():
        checks.append(
            check_prediction(
                name,
                tol,
                figure_value(current.prediction, name),
                figure_value(current.metrics, name),
                figure_value(current.normalized_error_pct, name),
            )
        )
    b_failed, c_failed = figure_value(baseline.metrics, "failed"), figure_value(current.metrics, "failed")
    if b_failed is not None or c_failed is not None:
        ok = c_failed is not None and (b_failed is None or c_failed <= b_failed)
        checks.append(GateCheck("failed", b_failed, c_failed, _delta(b_failed, c_failed), "<= baseline", ok, "health",
                                "" if c_failed is not None else "missing from the result"))
    if excuse:
        warnings.append(f"{excuse}: raw latency is shown, the normalized figures decide")
    return GateVerdict(current.scenario_name, current.allocator, tuple(checks), (*plan.notes, *warnings))


# --- JUnit XML --------------------------------------------------------------------------------
def format_number(v: float | None, significant: int = 6) -> str:
    """A check's figure as the gate writes it: integers with separators, others to `significant` digits."""
    if v is None:
        return "n/a"
    return f"{v:,}" if isinstance(v, int) or float(v).is_integer() else f"{v:,.{significant}g}"
