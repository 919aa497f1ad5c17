"""The verdict at the top of a run's report: what matched its prediction, what did not, and the
likely cause, machine speed or model, in a few sentences built from the same rows as the
prediction table (agreement.py), so words and colours cannot disagree with the numbers.

The reasoning: memory and schedule do not depend on the clock, so a miss there is the planner's.
A timing miss that disappears once the prediction is rescaled by the machine speed measured in
the run (`machine_speed_ratio`) was the machine (busy, throttled, or not the one calibrated); one
that stays was the model (cost model or simulated schedule).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from kvplan.gate.agreement import Agreement, agreements, summary
from kvplan.report.formatting import fmt
from kvplan.results.figures import LATENCY_TITLES, figure_value
from kvplan.results.result import RunResult
from kvplan.stress.machine_speed import slower_or_faster

SLOW, FAST = 1.3, 0.7  # machine_speed_ratio beyond these: the machine, not noise (the acceptance band)
CONTENDED_WAIT_SHARE = 0.10  # of step time waiting for a CPU: another process had the cores
HIGHLIGHT = ("mean_ttft_ms", "median_ttft_ms", "median_itl_ms", "mean_tpot_ms", "output_throughput")
MAX_LISTED = 4


@dataclass(frozen=True)
class Verdict:
    headline: str
    sentences: tuple[str, ...]
    status: Literal["pass", "fail", "warn"]  # a CSS class: all matched / something missed / could not judge
    tally: str = ""  # "memory 5/5, schedule 4/4, timing 9/9 within tolerance": the one line under the headline

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def pretty(key: str) -> str:
    """median_itl_ms -> 'median ITL'; output_throughput -> 'output throughput'."""
    parts = key.removesuffix("_ms").split("_")
    if len(parts) == 2 and parts[1] in LATENCY_TITLES:
        return f"{parts[0]} {LATENCY_TITLES[parts[1]]}"
    return key.replace("_", " ")


def _listed(rows: list[Agreement]) -> list[Agreement]:
    rank = {k: i for i, k in enumerate(HIGHLIGHT)}
    return sorted(rows, key=lambda r: (rank.get(r.key, len(rank)), -abs(r.error_pct or 0.0)))[:MAX_LISTED]


def _miss_text(r: Agreement) -> str:
    err = "none measured" if r.error_pct is None else f"{r.error_pct:+.0f}%"
    return (f"{pretty(r.key)} predicted {fmt(r.predicted, r.unit)}, measured {fmt(r.measured, r.unit)} "
            f"({err}, tolerance ±{r.tolerance_pct:g}%)")


def _within_text(rows: list[Agreement]) -> str:
    return ", ".join(f"{pretty(r.key)} within {abs(r.error_pct or 0.0):.0f}%" for r in _listed(rows))


def _kind_sentence(name: str, s: dict[str, list[Agreement]], why_missed: str) -> str | None:
    judged, missed = s["judged"], s["missed"]
    if not judged:
        return None
    if not missed:
        return f"{name} matched: {len(judged)} of {len(judged)} figures within tolerance."
    worst = sorted(missed, key=lambda r: -abs(r.error_pct if r.error_pct is not None else math.inf))
    return (f"{name} missed {len(missed)} of {len(judged)}: " + "; ".join(_miss_text(r) for r in worst[:2])
            + f"{' ...' if len(worst) > 2 else ''} ({why_missed}).")


def _tol_text(rows: list[Agreement]) -> str:
    """'±25%' when the rows share a tolerance, else the range: the verdict never quotes one row's
    tolerance for rows judged by others."""
    tols = sorted({r.tolerance_pct for r in rows})
    return f"±{tols[0]:g}%" if len(tols) == 1 else f"their tolerances (±{tols[0]:g}% to ±{tols[-1]:g}%)"


def _rescaled(rows: list[Agreement]) -> list[str]:
    return [f"{pretty(r.key)} {r.error_pct:+.0f}%" if r.error_pct is not None else pretty(r.key) for r in _listed(rows)]


def _speed_sentence(result: RunResult) -> str | None:
    m = result.metrics
    ratio = figure_value(m, "machine_speed_ratio")
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    if ratio > SLOW:
        text = (
            f"This machine ran {ratio:.1f}x slower than calibrated "
            f"(engine steps took {ratio:.2f}x the cost model's time)"
        )
    elif ratio < FAST:
        text = (
            f"This machine ran {1 / ratio:.1f}x faster than calibrated "
            f"(engine steps took {ratio:.2f}x the cost model's time)"
        )
    else:
        text = f"This machine ran at its calibrated speed (engine steps took {ratio:.2f}x the cost model's time)"
    wait = figure_value(m, "cpu_wait_share")
    if wait is not None and wait > CONTENDED_WAIT_SHARE:
        text += f"; the engine waited for a CPU {100 * wait:.0f}% of its step time: the machine was contended"
    ref, eng = figure_value(m, "reference_slowdown"), figure_value(m, "engine_speed_ratio")
    if ref and eng:
        text += (
            f"; measured apart from the engine, the machine was {slower_or_faster(ref)} than when calibrated and the "
            f"engine took {eng:.2f}x the model's time beyond that"
        )
    return text + "."


def _timing_sentences(result: RunResult, s: dict[str, dict[str, list[Agreement]]]) -> tuple[list[str], str]:
    """Sentences about raw and rescaled timing, and the cause word for the headline."""
    raw, norm = s["timing"], s["timing at measured speed"]
    if not raw["judged"]:
        return [], ""
    if not raw["missed"]:
        out = [
            f"Timing matched the prediction: {len(raw['judged'])} of {len(raw['judged'])} within "
            f"{_tol_text(raw['judged'])} "
            f"({_within_text(raw['judged'])})."
        ]
        if norm["missed"]:  # matched only because the machine's speed offset the model's error
            out.append(f"But at measured speed {len(norm['missed'])} of {len(norm['judged'])} miss "
                       f"{_tol_text(norm['missed'])} (" + ", ".join(_rescaled(norm["missed"])) + "): the model is off, "
                       "and the machine's speed happened to make up for it.")
            return out, "model"
        return out, ""
    out = [_kind_sentence("Timing", raw, "wall clock, as measured") or ""]
    ratio = figure_value(result.metrics, "machine_speed_ratio") or 1.0
    if not norm["judged"]:
        out.append("No machine speed was measured (no cost model, or a server target): a slow machine cannot be told "
                   "from a wrong model here.")
        return out, "cause unknown"
    if not norm["missed"]:
        out.append(f"After rescaling the prediction by that speed, all {len(norm['judged'])} timing figures are within "
                   f"{_tol_text(norm['judged'])} ({_within_text(norm['judged'])}).")
        modest = f" (a modest {ratio:.2f}x, enough to cross these tolerances)" if FAST <= ratio <= SLOW else ""
        return out + [f"Likely cause: the machine's speed{modest}, not the model."], "machine speed"
    missed = norm["missed"]
    out.append(
        f"Even at measured speed, {len(missed)} of {len(norm['judged'])} timing figures miss {_tol_text(missed)}: "
        + ", ".join(_rescaled(missed))
        + "."
        + (f" Within tolerance after rescaling: {_within_text(norm['passed'])}." if norm["passed"] else "")
    )
    if FAST <= ratio <= SLOW:
        return out + [
            "Likely cause: the model (cost model or simulated schedule), not the machine, which ran at its calibrated "
            "speed."
        ], "model"
    if all(r.error_pct is not None and abs(r.error_pct) <= 2 * r.tolerance_pct for r in missed):
        return out + [
            "Likely cause: mostly the machine's speed; the model is a little off (within twice the tolerance) "
            "for the figures that still miss."
        ], "machine speed, model slightly off"
    return out + [
        "Likely cause: the machine's speed explains part of it, the model (cost model or simulated schedule) the rest."
    ], "machine and model"


def build_verdict(result: RunResult, rows: list[Agreement] | None = None) -> Verdict:
    rows = agreements(result) if rows is None else rows
    s = summary(rows)
    sentences: list[str] = []
    if not result.complete:
        sentences.append("This run was interrupted: only the pool layout is judged; figures that depend on the whole "
                         "workload read 'incomplete'.")
    for name, kind, why in (
        ("Memory", "memory", "a planner error: machine speed does not change bytes"),
        ("Schedule", "schedule", "the simulated schedule; on a closed loop it also follows timing"),
    ):
        sentence = _kind_sentence(name, s[kind], why)
        if sentence:
            sentences.append(sentence)
    speed = _speed_sentence(result)
    if speed:
        sentences.append(speed)
    timing, cause = _timing_sentences(result, s)
    sentences += timing
    missed = [k for k in ("memory", "schedule", "timing", "timing at measured speed") if s[k]["missed"]]
    judged = sum(len(v["judged"]) for v in s.values())
    if not judged:
        return Verdict("nothing to compare", (*sentences, "No predicted figure was measured."), "warn")
    tally = ", ".join(f"{k} {len(s[k]['judged']) - len(s[k]['missed'])}/{len(s[k]['judged'])}"
                      for k in ("memory", "schedule", "timing") if s[k]["judged"]) + " within tolerance"
    if not missed:
        return Verdict("prediction held", tuple(sentences), "pass", tally)
    headline = "missed: " + ", ".join(missed) + (f" (likely {cause})" if cause else "")
    return Verdict(headline, tuple(sentences), "fail", tally)
