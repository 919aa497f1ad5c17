"""The engine beside CPU-bound neighbours: torch's one-thread-per-core default against the
engine's own choice (free cores), each on a quiet machine and beside `yes` busy loops.

ci-smoke on the bundled engine (its pinned thread count removed, so the choice is the engine's),
run by `kvplan stress` in a subprocess; prints output tok/s, median ITL, the threads used and the
share of step time the engine waited for a CPU. The slowdown column is against the same setting
without neighbours, from the same run of this script (the machine's other load changes minute to
minute: read the rows side by side).
Usage: .venv/bin/python benchmarks/thread_contention.py [--hogs 1] [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "ci-smoke.yaml"


def run(scenario: Path, out: Path, threads: int | None, hogs: int) -> dict:
    busy = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(hogs)]
    try:
        cmd = [
            sys.executable,
            "-m",
            "kvplan",
            "stress",
            "--scenario",
            str(scenario),
            "--out",
            str(out),
            "--force",
            "--no-progress",
        ]
        subprocess.run(
            cmd + (["--threads", str(threads)] if threads else []), check=True, capture_output=True, cwd=ROOT
        )
    finally:
        for p in busy:
            p.kill()
            p.wait()
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    return {
        "tok_s": m["output_throughput"],
        "itl_ms": m["median_itl_ms"],
        "threads": result["environment"]["engine_threads"],
        "how": result["environment"]["threads_how"],
        "wait": m.get("cpu_wait_share"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hogs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        data = yaml.safe_load(SCENARIO.read_text())
        data["engine"].pop("num_threads", None)
        scenario = Path(tmp) / "ci-smoke-free-threads.yaml"
        scenario.write_text(yaml.safe_dump(data))
        print(f"{cores} usable cores; {args.hogs} busy loop(s) beside the loaded runs")
        for rep in range(args.repeats):
            for label, threads in ((f"torch default ({cores} threads)", cores), ("engine's choice", None)):
                quiet = run(scenario, Path(tmp) / "q", threads, 0)
                loaded = run(scenario, Path(tmp) / "l", threads, args.hogs)
                for name, r in (("quiet", quiet), (f"+{args.hogs} hog", loaded)):
                    slow = quiet["tok_s"] / r["tok_s"]
                    print(
                        f"  {rep + 1} {label:26} {name:7} {r['tok_s']:7.1f} tok/s  ITL {r['itl_ms']:6.2f} ms  "
                        f"{r['threads']} thread(s) ({r['how']})  CPU wait {100 * (r['wait'] or 0):3.0f}%  slowdown "
                        f"{slow:4.2f}x"
                    )


if __name__ == "__main__":
    main()
