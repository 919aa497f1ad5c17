"""Predicted vs reported vLLM start-up figures, end to end (only GPU total, utilization, TP, dtype, KV
dtype, max_model_len and version are given), for every row of tests/data/reference/vllm-calibration.csv
(the fitted vLLM 0.19 / H100 set and two V0 excerpts) and vllm-startup-logs.csv (published logs of
other versions and GPUs). Prints each row, then the |error| per vLLM version group and per GPU: KV cache
tokens where the log has them, else the available KV cache memory.

    .venv/bin/python benchmarks/vllm_accuracy.py [CSV ...]

Exit status: 0 when the vllm-calibration.csv token rows meet the acceptance (median <= 2%, every row <= 5%).
"""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from startup_log_replay import PROFILE_OF, CalibrationRow, load_calibration

from kvplan.units import GIB

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "reference"
DEFAULT = (REFERENCE / "vllm-calibration.csv", REFERENCE / "vllm-startup-logs.csv")


def _row_line(row: CalibrationRow, err: tuple[str, float] | None) -> str:
    p, r = row.plan(), row.raw

    def pair(pred: float, key: str) -> str:
        return f"{pred / GIB:5.2f}/{float(r[key]):5.2f}" if r.get(key, "").strip() else f"{pred / GIB:5.2f}/  -  "

    tokens = f"{p.kv_cache_tokens:>9}/{r['reported_kv_tokens'] or '-':<9}"
    e = f"{100 * err[1]:+6.2f}% {err[0]}" if err else "   -"
    return (
        f"{r['model'].split('/')[-1][:22]:<22} {row.gpu_group[:10]:<10} {r['vllm_version'].split()[0]:<7} {r['tp']:>2} "
        f"{r['max_model_len'] or '-':>6} | {pair(p.weights_bytes, 'weights_gib')} "
        f"{pair(p.activation_bytes, 'activation_gib')} "
        f"{pair(p.non_torch_bytes, 'non_torch_gib')} {pair(p.available_kv_cache_bytes, 'available_kv_gib')} | {tokens} "
        f"{e}"
    )


def _summary(title: str, groups: dict[str, list[float]]) -> None:
    print(f"\n|error| by {title}:")
    print(f"  {'group':<22} {'rows':>4} {'median':>8} {'max':>8}")
    for name, errs in sorted(groups.items()):
        abs_errs = [abs(e) for e in errs]
        print(f"  {name:<22} {len(errs):>4} {100 * statistics.median(abs_errs):7.2f}% {100 * max(abs_errs):7.2f}%")


def main(paths: tuple[Path, ...] = DEFAULT) -> int:
    by_version: dict[str, list[float]] = defaultdict(list)
    by_gpu: dict[str, list[float]] = defaultdict(list)
    gate: list[float] = []
    print(
        f"{'model':<22} {'gpu':<10} {'vllm':<7} {'tp':>2} {'mml':>6} | {'weights':>11} {'activ.':>11} "
        f"{'non-torch':>11} "
        f"{'KV GiB':>11} | {'tokens pred/rep':>19} error"
    )
    for path in paths:
        print(f"-- {path.name}")
        for row in load_calibration(path):
            if row.raw["model"] not in PROFILE_OF:
                print(f"   row {row.index}: skipped, no bundled profile for {row.raw['model']}")
                continue
            err = row.error(row.plan())
            print(_row_line(row, err))
            if err is None:
                continue
            by_version[f"{row.version_group} [{err[0]}]"].append(err[1])
            by_gpu[f"{row.gpu_group} [{err[0]}]"].append(err[1])
            if path.name == "vllm-calibration.csv" and err[0] == "tokens":
                gate.append(abs(err[1]))
    print("\ncolumns: predicted/reported; '-' = not in the log")
    _summary("vLLM version group", by_version)
    _summary("GPU", by_gpu)
    ok = bool(gate) and statistics.median(gate) <= 0.02 and max(gate) <= 0.05
    print(
        f"\nacceptance on vllm-calibration.csv KV tokens ({len(gate)} rows): median "
        f"{100 * statistics.median(gate):.3f}%, "
        f"worst {100 * max(gate):.3f}% -> {'pass' if ok else 'FAIL'} (median <= 2%, every row <= 5%)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(tuple(Path(a) for a in sys.argv[1:]) or DEFAULT))
