"""Predicted vs published `vllm bench serve` figures for every row of
tests/data/reference/gpu-bench-calibration.csv: output throughput, mean TPOT and mean TTFT with
their errors, then median / P90 |error| overall and per source, and (--loso) leave-one-source-out:
the coefficients fitted without a source, that source predicted.

    .venv/bin/python benchmarks/gpu_accuracy.py            # score the stored coefficients
    .venv/bin/python benchmarks/gpu_accuracy.py --refit    # fit, store kvplan/data/perf/gpu_cost.yaml, score
    .venv/bin/python benchmarks/gpu_accuracy.py --loso     # also leave-one-source-out
    .venv/bin/python benchmarks/gpu_accuracy.py --lomo     # also leave-one-model-out
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model is a bundled profile: never ask the Hub

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from gpu_cost_fit import FITTED, Prepared, errors_pct, fit, fit_frontend, prepare  # noqa: E402
from published_runs import read_cases  # noqa: E402

from kvplan.perf.gpu_cost import Coefficients, fitted_coefficients  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "reference" / "gpu-bench-calibration.csv"
STORE = ROOT / "kvplan" / "data" / "perf" / "gpu_cost.yaml"
METRICS = (("err_output_tok_s", "output tok/s"), ("err_tpot", "mean TPOT"), ("err_ttft", "mean TTFT"))


def summary(rows: list[tuple[Prepared, dict]]) -> dict[str, dict[str, float]]:
    out = {}
    for key, label in METRICS:
        v = np.array([abs(e[key]) for p, e in rows if e[key] is not None])
        if len(v):
            out[label] = {
                "median_abs_pct": round(float(np.median(v)), 1),
                "p90_abs_pct": round(float(np.percentile(v, 90)), 1),
                "rows": int(len(v)),
            }
    return out


def print_summary(title: str, s: dict[str, dict[str, float]]) -> None:
    print(f"{title}: " + "; ".join(f"{k} median {v['median_abs_pct']:.1f}% P90 {v['p90_abs_pct']:.1f}% (n={v['rows']})"
                                   for k, v in s.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--refit", action="store_true", help="fit the coefficients and store them in the package")
    ap.add_argument("--loso", action="store_true", help="leave-one-source-out errors")
    ap.add_argument("--lomo", action="store_true", help="leave-one-model-out errors (refit without a model's rows)")
    ap.add_argument("--iterations", type=int, default=600)
    ap.add_argument("--frontend-grid", default="0,0.001,0.002,0.003,0.005,0.01,0.02",
                    help="API-server seconds per request to try when refitting (comma-separated)")
    a = ap.parse_args()
    cases, skipped = read_cases(a.csv)
    prepared, unrepresented = [], list(skipped)
    for case in cases:
        p = prepare(case)
        (prepared if isinstance(p, Prepared) else unrepresented).append(p)
    coeffs = fitted_coefficients()[0]
    if a.refit:
        grid = tuple(float(v) for v in a.frontend_grid.split(","))
        coeffs, prepared = fit_frontend(cases, grid, iterations=a.iterations)
    rows = [(p, errors_pct(p, coeffs)) for p in prepared]
    vllm_rows = [(p, e) for p, e in rows if p.fittable]
    other_rows = [(p, e) for p, e in rows if not p.fittable]
    if a.refit:
        meta = {
            "fitted_on": dt.date.today().isoformat(),
            "source": "tests/data/reference/gpu-bench-calibration.csv "
            "(published vLLM/SGLang serving runs; see SOURCES.md)",
            "method": "Nelder-Mead on sum |log error| of output tok/s, mean TPOT, mean TTFT "
            "over the vLLM rows sent all at once, plus 0.05 x the squared log (logit) distance of each "
            "coefficient from its datasheet prior (gpu_cost_fit.PRIOR_WEIGHT)",
            "fitted": [*FITTED, "frontend_request_s (grid: " + a.frontend_grid + ")"],
            "rows_fitted": len(vllm_rows),
            "summary": summary(vllm_rows),
            "priors_not_fitted": [k for k in Coefficients.names() if k not in FITTED and k != "frontend_request_s"],
            "coefficients": {k: float(f"{v:.6g}") for k, v in asdict(coeffs).items()},
        }
        STORE.write_text(
            "# Global GPU cost-model coefficients (kvplan/perf/gpu_cost.py). Refit: benchmarks/gpu_accuracy.py "
            "--refit\n"
            + yaml.safe_dump(meta, sort_keys=False)
        )
        fitted_coefficients.cache_clear()
    print(
        f"{'row':>3} {'source':<14} {'model':<20} {'gpu':<14} {'tp':>2} {'ver':<7} {'in':>5} {'out':>5} {'n':>5} "
        f"{'rate':>4} "
        f"| {'tok/s pred/pub':>17} {'err%':>5} | {'TPOT ms':>15} {'err%':>5} | {'TTFT ms':>19} {'err%':>5}"
    )
    for p, e in sorted(rows, key=lambda pe: pe[0].case.row):
        c = p.case

        def pair(pred: float | None, pub: float | None, w: int) -> str:
            return f"{pred:.0f}/{pub:.0f}".rjust(w) if pred is not None and pub is not None else "-".rjust(w)

        def err(key: str) -> str:
            return f"{e[key]:+5.0f}" if e[key] is not None else "    -"

        print(
            f"{c.row:>3} {c.source.split('/')[0][:14]:<14} {c.model[:20]:<20} {c.gpu[:14]:<14} {c.tp:>2} "
            f"{c.vllm_version[:7]:<7} "
            f"{c.input_len:>5} {c.output_len:>5} {c.num_prompts:>5} {c.request_rate:>4.0f} | "
            f"{pair(e['pred_output_tok_s'], c.output_tok_s, 17)} {err('err_output_tok_s')} | "
            f"{pair(e['pred_tpot_ms'], c.mean_tpot_ms, 15)} {err('err_tpot')} | "
            f"{pair(e['pred_ttft_ms'], c.mean_ttft_ms, 19)} {err('err_ttft')}"
        )
    for s in unrepresented:
        print(f"{s.row:>3} {s.source.split('/')[0][:14]:<14} not represented: {s.reason}")
    print()
    print_summary(f"vLLM rows ({len(vllm_rows)})", summary(vllm_rows))
    if other_rows:
        print_summary(f"other rows, not fitted ({len(other_rows)}: SGLang / timed arrivals)", summary(other_rows))
    for source in sorted({p.case.source for p, _ in vllm_rows}):
        print_summary(f"  {source}", summary([(p, e) for p, e in vllm_rows if p.case.source == source]))
    for flag, key, label in ((a.loso, lambda p: p.case.source, "source"), (a.lomo, lambda p: p.case.model, "model")):
        if not flag:
            continue
        held: list[tuple[Prepared, dict]] = []
        for group in sorted({key(p) for p, _ in vllm_rows}):
            train = [p for p in prepared if key(p) != group]
            c = fit(train, start=replace(Coefficients(), frontend_request_s=coeffs.frontend_request_s),
                    iterations=a.iterations)
            test = [(p, errors_pct(p, c)) for p in prepared if key(p) == group and p.fittable]
            print_summary(f"  left out {group}", summary(test))
            held += test
        print_summary(f"leave-one-{label}-out, all held-out vLLM rows", summary(held))
    return 0


if __name__ == "__main__":
    sys.exit(main())
