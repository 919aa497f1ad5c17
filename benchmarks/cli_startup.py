"""Wall time of `kvplan estimate` against `python -c pass`, side by side in one run.

Goal (issue 2): `kvplan estimate` at most 0.4 s on the 2-core CI machine.
Usage: .venv/bin/python benchmarks/cli_startup.py [--runs 15]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ESTIMATE = [sys.executable, "-m", "kvplan", "estimate", "--model", "llama-2-7b", "--ctx", "4096",
            "--concurrency", "8", "--gpu", "h100", "--json"]
BASELINE = [sys.executable, "-c", "pass"]


def wall_s(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[1])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    wall_s(ESTIMATE)  # warm the page cache and .pyc files
    est, base = [], []
    for _ in range(args.runs):  # interleaved so both see the same machine load
        base.append(wall_s(BASELINE))
        est.append(wall_s(ESTIMATE))
    m_est, m_base = statistics.median(est), statistics.median(base)
    print(f"python -c pass      median {m_base * 1000:7.1f} ms  (min {min(base) * 1000:.1f})")
    print(f"kvplan estimate     median {m_est * 1000:7.1f} ms  (min {min(est) * 1000:.1f})")
    print(f"ratio {m_est / m_base:.1f}x, kvplan's own cost {(m_est - m_base) * 1000:.1f} ms; "
          f"goal <= 400 ms: {'met' if m_est <= 0.4 else 'MISSED'}")


if __name__ == "__main__":
    main()
