"""Time `kvplan.plan.sweep.sweep` on a 100,000-point grid (issue 3: under a second).

    .venv/bin/python benchmarks/sweep_speed.py
50 contexts x 50 concurrencies x 2 KV dtypes x 4 block sizes x 5 GPUs = 100,000 points.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from kvplan.plan.sweep import sweep
from kvplan.spec.gpu import load_gpu
from kvplan.spec.profiles import load_model


def main() -> int:
    spec = load_model("llama-3.1-8b-instruct")
    ctx = np.unique(np.geomspace(256, 131072, 50).astype(int)).tolist()
    while len(ctx) < 50:
        ctx.append(ctx[-1] + 1)
    grid = dict(
        ctx_tokens=ctx,
        concurrency=list(range(1, 51)),
        kv_cache_dtypes=["auto", "fp8"],
        block_sizes=[8, 16, 32, 64],
        gpus=[load_gpu(g) for g in ("h100", "a100", "l40s", "l4", "h200")],
    )
    sweep(spec, **{**grid, "ctx_tokens": ctx[:2], "concurrency": [1]})  # warm imports and caches
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        df = sweep(spec, **grid)
        best = min(best, time.perf_counter() - t0)
    print(f"{len(df):,} grid points in {best * 1000:.1f} ms (best of 5); {len(df) / best / 1e6:.2f} M points/s")
    print(df.groupby(["gpu", "kv_cache_dtype"], observed=True)["fits"].mean().round(3).to_string())
    return 0 if len(df) == 100_000 and best < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
