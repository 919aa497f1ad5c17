"""`report.html`: one self-contained page per set of stress results (`kvplan report`).

Python builds plain view data (frozen dataclasses, formatted strings); the jinja2 template only
lays it out. Autoescape is on for every template, so scenario, class and model names, which are
user text, are always escaped; figures are SVG `data:` URIs (see plots.py) and the page has a
Content-Security-Policy that forbids loading anything from anywhere, so it renders offline.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kvplan.errors import KvplanError
from kvplan.files import write_text_atomic
from kvplan.gate.agreement import Agreement, agreements
from kvplan.report.formatting import describe_value, fmt, fmt_named, fmt_pct, setting_text
from kvplan.report.jinja import render_template
from kvplan.report.verdict import Verdict, build_verdict
from kvplan.results.figures import (
    FIGURES,
    LATENCIES,
    LATENCY_TITLES,
    SLO_TO_METRIC,
    figure_value,
    percentile_word,
    prediction_key,
    unit_of,
)
from kvplan.results.result import RunResult
from kvplan.stress.scenario import Scenario
from kvplan.units import MIB

ALLOCATOR_ROWS: tuple[str, ...] = tuple(f.name for f in FIGURES.values() if f.in_allocator_table)
THROUGHPUT_KEYS: tuple[str, ...] = tuple(f.name for f in FIGURES.values() if f.group in ("throughput", "requests"))


# --- view data --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """A table row of already formatted cells (the template escapes them)."""

    cells: tuple[str, ...]
    status: str = ""  # "", "pass", "fail": a CSS class


@dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[Row, ...]
    note: str = ""


@dataclass(frozen=True)
class ResultView:
    anchor: str
    title: str
    allocator: str
    complete: bool
    notes: tuple[str, ...]
    facts: tuple[tuple[str, str], ...]  # header key/value pairs
    tables: dict[str, Table]  # settings, workload, environment, prediction, throughput, goodput, latency_*
    figures: dict[str, Any]  # InlineFigure by key
    latency_tables: tuple[Table, ...] = field(default_factory=tuple)
    failed: str = ""  # the failure line of a run that failed its max_error_rate, else empty
    verdict: Verdict | None = None  # what matched the prediction, what did not, and why (verdict.py)


def _scenario(result: RunResult) -> Scenario | None:
    try:
        return Scenario.model_validate(result.scenario)
    except ValidationError:
        return None  # still render what is there: a report should not refuse an old result


STATUS_CLASS = {"pass": "pass", "miss": "fail"}  # the rest ("incomplete", "not measured", ...) stay grey
STATUS_TEXT = {"pass": "within", "miss": "MISS"}


def _prediction_table(result: RunResult, rows: Sequence[Agreement]) -> tuple[Table, list[Any]]:
    from kvplan.report.plots import BarRow

    out, bars = [], []
    for r in rows:
        p, m = r.predicted, r.measured
        err = (fmt_pct(r.error_pct) if r.error_pct is not None else "measured 0" if r.status == "miss"
               else r.status if r.status in ("incomplete", "not measured") else "—")
        measured = "not measured" if m is None else fmt(m, r.unit)
        out.append(
            Row(
                (
                    r.kind,
                    r.label,
                    fmt(p, r.unit),
                    measured,
                    err,
                    f"±{r.tolerance_pct:g}%" + ("" if r.tolerance_from == "scenario gate" else "*"),
                    STATUS_TEXT.get(r.status, r.status),
                ),
                STATUS_CLASS.get(r.status, "na"),
            )
        )
        if r.kind in ("memory", "timing") and p is not None and m is not None and r.unit in ("bytes", "ms") \
                and r.key not in ("kv_pool_bytes", "bytes_per_block"):
            scale = MIB if r.unit == "bytes" else 1.0
            bars.append(
                BarRow(
                    r.key.removesuffix("_bytes").removesuffix("_ms"),
                    p / scale,
                    m / scale,
                    "MiB" if r.unit == "bytes" else "ms",
                )
            )
    speed = figure_value(result.metrics, "machine_speed_ratio")
    note = (
        "error % = (predicted − measured) / measured, the convention of `kvplan stress` and of result.json's "
        "normalized_error_pct; a row is within when |error %| is at most its tolerance. "
        + (
            f"'at measured speed': the prediction scaled by this run's machine speed ({speed:.2f}x the calibrated "
            "step time: times multiplied, rates divided), separating a slow machine from a wrong model. "
            if speed
            else ""
        )
        + "Tolerances: the scenario's gate.prediction where it names the figure, else (*) the report's defaults: "
        "pool layout exact, peaks 5%, schedule 10%, wall-clock timing 50%, timing at measured speed 25%."
    )
    header = ("kind", "figure", "predicted", "measured", "error % (pred − meas) / meas", "tolerance", "verdict")
    return Table("Prediction vs measurement", header, tuple(out), note), bars


def _latency_tables(result: RunResult, scenario: Scenario | None) -> tuple[Table, ...]:
    pcts: list[float] = [50, 90, 95, 99]
    if scenario is not None and scenario.slo.percentile not in pcts:
        pcts.append(scenario.slo.percentile)
    groups = {"all": result.metrics, **result.per_class}
    tables = []
    for m in LATENCIES:
        header = ("class", "mean", "median", *(f"p{percentile_word(p)}" for p in pcts if p != 50))
        rows = []
        for name, metrics in groups.items():
            cells = [metrics.get(f"mean_{m}_ms"), metrics.get(f"median_{m}_ms"),
                     *(metrics.get(f"p{percentile_word(p)}_{m}_ms") for p in pcts if p != 50)]
            rows.append(Row((name, *(fmt(v, "ms") for v in cells))))
        tables.append(Table(LATENCY_TITLES[m], header, tuple(rows)))
    return tuple(tables)


def _throughput_table(result: RunResult) -> Table:
    groups = {"all": result.metrics, **result.per_class}
    header = ("figure", *groups)
    rows = tuple(Row((k, *(fmt(g.get(k), unit_of(k)) for g in groups.values()))) for k in THROUGHPUT_KEYS
                 if any(g.get(k) is not None for g in groups.values()))
    return Table(
        "Throughput",
        header,
        rows,
        "Per-class throughputs divide by the whole run's duration, so they add up. "
        "max_concurrent_requests (vLLM's name) counts requests in flight as the client saw them: sent and not "
        "finished, queued ones included, so it reaches the closed loop's concurrency or the arrivals' backlog; "
        "peak_running_requests counts those the engine ran in one step, capped by max_num_seqs and the KV pool.",
    )


def _goodput_table(result: RunResult, scenario: Scenario | None) -> Table:
    if scenario is None or not scenario.slo.limits_ms:
        return Table("Goodput against the SLO", ("",), (), "The scenario sets no SLO: goodput is undefined.")
    slo = scenario.slo
    word = percentile_word(slo.percentile)
    rows = []
    for name, limit in slo.limits_ms.items():
        key = f"p{word}_{SLO_TO_METRIC[name]}_ms"
        value = figure_value(result.metrics, key)
        ok = None if value is None else value <= limit
        rows.append(
            Row(
                (
                    f"{name} at p{word}",
                    fmt(limit, "ms"),
                    fmt(value, "ms"),
                    {None: "—", True: "met", False: "MISSED"}[ok],
                ),
                "" if ok is None else ("pass" if ok else "fail"),
            )
        )
    groups = {"all": result.metrics, **result.per_class}
    for gname, g in groups.items():
        rows.append(
            Row(
                (
                    f"good requests ({gname})",
                    "",
                    f"{fmt(g.get('good_requests'))} of {fmt(g.get('num_requests'))}",
                    f"{fmt(g.get('goodput_ratio'), 'ratio')} · {fmt(g.get('request_goodput'), 'req/s')}",
                )
            )
        )
    slo_met = result.metrics.get('slo_met')
    verdict = 'all SLOs met' if slo_met else 'SLO missed' if slo_met is False else 'n/a'
    note = (
        "A request is good when every SLO holds for it (ITL: its own p" + word + " gap). "
        f"Run verdict: {verdict}."
    )
    return Table("Goodput against the SLO", ("SLO", "limit", "measured", "verdict"), tuple(rows), note)


def _settings_tables(result: RunResult, scenario: Scenario | None) -> dict[str, Table]:
    sc = result.scenario
    engine = dict(sc.get("engine") or {})
    if engine.get("allocator", result.allocator) != result.allocator:  # `--allocator both` runs one scenario twice
        engine["allocator"] = (
            f"{result.allocator} (this run, by --allocator; the scenario file says {engine['allocator']})"
        )
    settings = Table(
        "Engine settings", ("setting", "value"), tuple(Row((k, setting_text(k, v))) for k, v in engine.items())
    )
    classes = (sc.get("workload") or {}).get("classes") or []
    workload = Table(
        "Workload",
        ("class", "weight", "prompt tokens", "output tokens", "shared prefix"),
        tuple(
            Row(
                (
                    str(c.get("name", "")),
                    describe_value(c.get("weight", "")),
                    describe_value(c.get("prompt_tokens", "")),
                    describe_value(c.get("output_tokens", "")),
                    describe_value(c.get("shared_prefix", "—")),
                )
            )
            for c in classes
            if isinstance(c, Mapping)
        ),
        " · ".join(
            f"{k}: {describe_value(sc[k])}"
            for k in ("arrival", "num_requests", "duration_s", "warmup_requests", "seed", "slo")
            if k in sc
        ),
    )
    env = result.environment.model_dump()
    environment = Table("Environment", ("", ""), tuple(Row((k, fmt_named(k, v))) for k, v in env.items()
                                                       if v is not None))
    tables = {"settings": settings, "workload": workload, "environment": environment}
    cost = result.prediction.get("cost_model")
    if isinstance(cost, Mapping) and cost:
        tables["cost_model"] = Table(
            "Cost model of the prediction", ("", ""),
            tuple(Row((str(k), fmt_named(str(k), v))) for k, v in cost.items()),
        )
    if result.server_info:
        tables["server"] = Table(
            "Server", ("", ""), tuple(Row((str(k), describe_value(v))) for k, v in result.server_info.items())
        )
    return tables


def _model_text(result: RunResult) -> str:
    model = result.scenario.get("model")
    if isinstance(model, Mapping):
        name = str(model.get("name", ""))
        return name + (f" (overrides: {describe_value(model['overrides'])})" if model.get("overrides") else "")
    return str(model or "")


def _status_text(result: RunResult) -> str:
    if result.verdict == "failed":
        errors = "; ".join(result.errors[:3])
        return (f"FAILED: {result.metrics.get('failed')} of {result.metrics.get('num_requests')} requests failed"
                + (f" (first errors: {errors})" if errors else ""))
    return "complete" if result.complete else "INCOMPLETE: interrupted; figures cover what ran"


def build_view(result: RunResult, anchor: str) -> ResultView:
    from kvplan.report import agreement_plot, plots

    scenario = _scenario(result)
    records = result.records()
    rows = agreements(result)
    prediction, bars = _prediction_table(result, rows)
    env = result.environment
    facts = (("scenario", result.scenario_name), ("description", str(result.scenario.get("description", "")) or "—"),
             ("model", _model_text(result)), ("allocator", result.allocator),
             *((("replicas", f"{result.scenario['replicas']} behind the {result.scenario.get('router')} router"),)
               if result.scenario.get("replicas", 1) > 1 else ()),
             ("device", f"{env.device}" + (f" ({env.device_name})" if env.device_name else "")),
             ("git commit", env.git_commit or "unknown"), ("run at", result.created_at),
             ("requests", f"{len(records):,} recorded ({sum(r.is_warmup for r in records)} warmup)"),
             ("status", _status_text(result)))
    slo_ms = scenario.slo.limits_ms if scenario else {}
    figures = {f.key: f for f in (plots.kv_memory_figure(result), plots.engine_load_figure(result),
                                  plots.latency_cdf_figure(records, slo_ms), plots.prediction_bars_figure(bars),
                                  agreement_plot.ratio_figure(rows))
               if f is not None}
    tables = {**_settings_tables(result, scenario), "prediction": prediction, "throughput": _throughput_table(result),
              "goodput": _goodput_table(result, scenario)}
    return ResultView(anchor, f"{result.scenario_name} · {result.allocator}", result.allocator, result.complete,
                      tuple(result.notes), facts, tables, figures, _latency_tables(result, scenario),
                      _status_text(result) if result.verdict == "failed" else "", build_verdict(result, rows))


@dataclass(frozen=True)
class ComparisonView:
    anchor: str
    scenario: str
    table: Table
    figure: Any


def build_comparison(paged: RunResult, contiguous: RunResult, anchor: str) -> ComparisonView:
    from kvplan.report.plots import allocator_figure

    rows = []
    for key in ALLOCATOR_ROWS:
        unit = unit_of(key)
        vals = [figure_value(r.prediction, prediction_key(key)) for r in (paged, contiguous)] + [
            figure_value(r.metrics, key) for r in (paged, contiguous)
        ]
        if all(v is None for v in vals):
            continue
        pp, cp, pm, cm = vals
        ratio = "—" if pm is None or cm in (None, 0) else f"{pm / cm:.2f}x"
        rows.append(Row((key, fmt(pp, unit), fmt(pm, unit), fmt(cp, unit), fmt(cm, unit), ratio)))
    table = Table(
        "Paged vs contiguous on the same KV memory",
        (
            "figure",
            "paged predicted",
            "paged measured",
            "contiguous predicted",
            "contiguous measured",
            "paged / contiguous",
        ),
        tuple(rows),
        "Contiguous preallocation reserves max_model_len per request; paged allocates blocks as tokens arrive.",
    )
    return ComparisonView(
        anchor, paged.scenario_name, table, allocator_figure({"paged": paged, "contiguous": contiguous})
    )


def _group(results: Sequence[RunResult]) -> list[tuple[str, dict[str, RunResult]]]:
    """Results by scenario, in the order given; one per allocator per scenario."""
    groups: dict[str, dict[str, RunResult]] = {}
    for r in results:
        by_alloc = groups.setdefault(r.scenario_name, {})
        if r.allocator in by_alloc:
            raise KvplanError(f"two results of scenario {r.scenario_name!r} with the {r.allocator} allocator; "
                              "give at most one per allocator (use `kvplan gate` to compare runs)")
        by_alloc[r.allocator] = r
    return list(groups.items())


def render_report(results: Sequence[RunResult]) -> str:
    if not results:
        raise KvplanError("no results to report")
    sections: list[Any] = []
    comparisons: list[Any] = []
    n = 0
    for _scenario, by_alloc in _group(results):
        if {"paged", "contiguous"} <= set(by_alloc):
            comparisons.append(build_comparison(by_alloc["paged"], by_alloc["contiguous"], f"cmp{len(comparisons)}"))
        for r in by_alloc.values():
            sections.append(build_view(r, f"r{n}"))
            n += 1
    names = list(dict.fromkeys(r.scenario_name for r in results))
    title = "kvplan report: " + ", ".join(names)
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return render_template(
        "report.html.j2", title=title, sections=sections, comparisons=comparisons, generated=generated
    )


def write_report(results: Sequence[RunResult], path: str | Path) -> Path:
    """Render and write atomically: a half-written report never replaces a good one."""
    return write_text_atomic(path, render_report(list(results)))

