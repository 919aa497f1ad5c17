"""Serving metrics from per-request records, keyed as vLLM's `benchmark_serving.py` keys them.

Definitions (docs/metrics.md has the full table and the guidellm / AIPerf aliases):
- TTFT = first token - arrival; E2EL = finish - arrival.
- TPOT = (last token - first token) / (output_tokens - 1), first token excluded; undefined (left
  out) for one-token outputs.
- ITL = every gap between consecutive tokens, pooled over all requests (so long outputs weigh more).
- Statistics: mean, median, std (population, ddof=0, as vLLM) and percentiles by `np.percentile`
  (linear interpolation, as vLLM). No data -> None, never a made-up 0.
- Only `ok` requests feed latencies and throughput; warmup requests are left out of everything.
- Throughput divides by the run's span: first non-warmup arrival to last non-warmup finish.
- Goodput: an ok request is good when every given SLO holds for it: ttft, tpot (vacuous for
  one-token outputs), e2e, and itl as the SLO percentile of that request's own token gaps.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kvplan.results.figures import LATENCIES, PERCENTILES, SLO_TO_METRIC, percentile_word
from kvplan.results.record import RequestRecord

if TYPE_CHECKING:

    from kvplan.results.slo import Slo


def _percentiles(slo: Slo | None, percentiles: Sequence[float]) -> tuple[float, ...]:
    extra = (slo.percentile,) if slo is not None and slo.percentile not in percentiles else ()
    return tuple(sorted({*percentiles, *extra}))


def summarize_ms(
    values_s: Iterable[float], name: str, percentiles: Sequence[float] = PERCENTILES
) -> dict[str, float | None]:
    """mean/median/std/pXX of `values_s` (seconds) as `{stat}_{name}_ms`; None for no data."""
    arr = np.asarray(list(values_s), dtype=float) * 1000.0
    empty = arr.size == 0
    out: dict[str, float | None] = {
        f"mean_{name}_ms": None if empty else float(np.mean(arr)),
        f"median_{name}_ms": None if empty else float(np.median(arr)),
        f"std_{name}_ms": None if empty else float(np.std(arr)),
    }
    for p in percentiles:
        out[f"p{percentile_word(p)}_{name}_ms"] = None if empty else float(np.percentile(arr, p))
    return out


def request_itl_percentile_s(record: RequestRecord, percentile: float) -> float | None:
    gaps = record.itl_s
    return float(np.percentile(gaps, percentile)) if gaps.size else None


def meets_slo(record: RequestRecord, slo: Slo) -> bool:
    """Every given SLO holds for this request (only ok requests can)."""
    if record.status != "ok":
        return False
    checks = {
        "ttft": record.ttft_s,
        "tpot": record.tpot_s,
        "itl": request_itl_percentile_s(record, slo.percentile),
        "e2e": record.e2e_s,
    }
    for key, limit_ms in slo.limits_ms.items():
        value = checks[key]
        if value is None:
            if key in ("ttft", "e2e"):
                return False  # an ok request without these times cannot be shown to meet them
            continue  # tpot/itl are vacuous for one-token outputs (vLLM counts tpot as 0 there)
        if value * 1000.0 > limit_ms:
            return False
    return True


def run_span_s(records: Sequence[RequestRecord]) -> float | None:
    """First arrival to last finish (any status) of the given records."""
    if not records:
        return None
    start = min(r.arrival_s for r in records)
    ends = [t for r in records for t in (r.finish_s, r.last_token_s, r.arrival_s) if t is not None]
    span = max(ends) - start
    return span if span > 0 else None


def max_in_flight(records: Sequence[RequestRecord]) -> int:
    """Most requests submitted and not yet finished at once (client view: queued ones count)."""
    events = [(r.arrival_s, 1) for r in records] + [(r.finish_s, -1) for r in records if r.finish_s is not None]
    events.sort(key=lambda e: (e[0], e[1]))  # a finish at the same instant frees its slot first
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def _measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.is_warmup]


def _compute(
    measured: list[RequestRecord], span_s: float | None, slo: Slo | None, pcts: tuple[float, ...]
) -> dict[str, Any]:
    ok = [r for r in measured if r.status == "ok"]
    errored = sum(r.status == "error" for r in measured)
    aborted = sum(r.status == "aborted" for r in measured)
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)

    def per_s(n: float) -> float | None:
        return n / span_s if span_s else None

    out: dict[str, Any] = {
        "num_requests": len(measured), "completed": len(ok), "failed": errored + aborted, "errored": errored,
        "aborted": aborted, "duration": span_s, "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": per_s(len(ok)), "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "request_goodput": None, "good_requests": None, "goodput_ratio": None,
        "max_concurrent_requests": max_in_flight(measured), "slo_met": None,
    }
    series = {
        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
        "tpot": [r.tpot_s for r in ok if r.tpot_s is not None],
        "itl": np.concatenate([r.itl_s for r in ok]) if ok else np.empty(0),
        "e2el": [r.e2e_s for r in ok if r.e2e_s is not None],
    }
    for name in LATENCIES:
        out.update(summarize_ms(series[name], name, pcts))
    if slo is not None and slo.limits_ms:
        good = sum(meets_slo(r, slo) for r in ok)
        out.update(
            good_requests=good, request_goodput=per_s(good), goodput_ratio=good / len(measured) if measured else None
        )
        word = percentile_word(slo.percentile)
        at_pct = [out[f"p{word}_{SLO_TO_METRIC[k]}_ms"] for k in slo.limits_ms]
        if all(v is not None for v in at_pct):
            out["slo_met"] = all(v <= limit for v, limit in zip(at_pct, slo.limits_ms.values()))
    return out


def compute_metrics(records: Iterable[RequestRecord], slo: Slo | None = None, *,
                    percentiles: Sequence[float] = PERCENTILES, duration_s: float | None = None) -> dict[str, Any]:
    """The flat, vLLM-keyed metrics dict of a run (warmup requests excluded).

    `duration_s` overrides the span used for throughput (default: first arrival to last finish).
    `slo_met` says whether each SLO limit holds at `slo.percentile` over the whole run.
    """
    measured = _measured(records)
    span = duration_s if duration_s is not None else run_span_s(measured)
    return _compute(measured, span, slo, _percentiles(slo, percentiles))


def compute_per_class_metrics(records: Iterable[RequestRecord], slo: Slo | None = None, *,
                              percentiles: Sequence[float] = PERCENTILES,
                              duration_s: float | None = None) -> dict[str, dict[str, Any]]:
    """`compute_metrics` per request class; throughput over the whole run's span, so classes add up."""
    measured = _measured(records)
    span = duration_s if duration_s is not None else run_span_s(measured)
    pcts = _percentiles(slo, percentiles)
    names = list(dict.fromkeys(r.class_name for r in measured))
    return {name: _compute([r for r in measured if r.class_name == name], span, slo, pcts) for name in names}
