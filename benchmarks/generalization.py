"""Source-split evaluation, the only accuracy figure kvplan reports for time: for each source of
measured vLLM runs, fit the global coefficients on every other source and predict it.

Sources: the published serving runs of `tests/data/reference/gpu-bench-calibration.csv`, one
source per repository (`source_url`; `benchmarks/published_runs.py` reads each row as it was run:
client, rate, lengths, server flags, KV pool from its start-up log). For each held-out source the
coefficients are refit (`gpu_cost_fit.fit`, the same procedure `gpu_accuracy.py --refit` stores),
then every vLLM row of the source is predicted. Printed per source and pooled: median and P90 of
|error| and the signed median, error = (predicted - measured) / measured, for output throughput,
mean TPOT, mean TTFT and mean E2E latency (where the source publishes them).

    .venv/bin/python benchmarks/generalization.py     # about 2 minutes on 2 cores

A mechanism or coefficient stays in kvplan only if the pooled figures printed here improve.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_cost_fit import Prepared, fit, prepare  # noqa: E402
from published_runs import read_cases  # noqa: E402

from kvplan.perf.gpu_cost import Coefficients, fitted_coefficients  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "data" / "reference" / "gpu-bench-calibration.csv"
METRICS = ("output tok/s", "mean TPOT", "mean TTFT", "mean E2E")


def errors(p: Prepared, c: Coefficients) -> dict[str, float]:
    """Signed % errors of one row, predicted with coefficients `c`."""
    t = p.replay(c)
    thr, tpot_s, ttft_s = t.headline()
    e2e_ms = float((t.last_s - t.send_s).mean() * 1e3) if len(t.last_s) else 0.0
    case = p.case
    out = {"output tok/s": 100 * (thr / case.output_tok_s - 1)}
    for name, predicted, measured in (("mean TPOT", tpot_s * 1e3, case.mean_tpot_ms),
                                      ("mean TTFT", ttft_s * 1e3, case.mean_ttft_ms),
                                      ("mean E2E", e2e_ms, case.mean_e2e_ms)):
        if measured:
            out[name] = 100 * (predicted / measured - 1)
    return out


def line(title: str, rows: list[dict[str, float]]) -> str:
    parts = []
    for metric in METRICS:
        v = np.array([r[metric] for r in rows if metric in r])
        if len(v):
            parts.append(f"{metric} {np.median(np.abs(v)):.1f}% (P90 {np.percentile(np.abs(v), 90):.1f}%, "
                         f"signed {np.median(v):+.1f}%, n={len(v)})")
    return f"{title}: " + "; ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--iterations", type=int, default=600)
    a = ap.parse_args()
    cases, _ = read_cases(a.csv)
    prepared = [p for p in (prepare(c) for c in cases) if isinstance(p, Prepared)]
    frontend_s = fitted_coefficients()[0].frontend_request_s
    pooled: list[dict[str, float]] = []
    for source in sorted({p.case.source for p in prepared if p.fittable}):
        c = fit([p for p in prepared if p.case.source != source],
                start=replace(Coefficients(), frontend_request_s=frontend_s), iterations=a.iterations)
        held = [errors(p, c) for p in prepared if p.case.source == source and p.fittable]
        print(line(f"held out {source} ({len(held)} rows)", held), flush=True)
        pooled += held
    print(line(f"pooled, every source held out ({len(pooled)} rows)", pooled))
    return 0


if __name__ == "__main__":
    sys.exit(main())
