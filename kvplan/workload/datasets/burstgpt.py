"""burstgpt: BurstGPT's CSV (`Model`, `Request tokens`, `Response tokens`, ...). As vLLM: the GPT-4
rows with a positive response, sampled with pandas' `sample(random_state=seed)` (with replacement
when too few)."""
from __future__ import annotations

import io
from pathlib import Path

from kvplan.workload.datasets.ref import DatasetRef
from kvplan.workload.datasets.source import MAX_ROWS, ReadContext, dataset_error, read_dataset_text
from kvplan.workload.request import Request


def read(ref: DatasetRef, path: Path, ctx: ReadContext) -> list[Request]:
    import pandas as pd

    try:
        df = pd.read_csv(io.StringIO(read_dataset_text(path)), nrows=MAX_ROWS)
    except (ValueError, pd.errors.ParserError) as exc:
        raise dataset_error(path, f"not a CSV file: {str(exc).splitlines()[0]}") from None
    missing = [c for c in ("Model", "Request tokens", "Response tokens") if c not in df.columns]
    if missing:
        raise dataset_error(
            path, f"BurstGPT's CSV has the columns Model, Request tokens, Response tokens; missing {', '.join(missing)}"
        )
    df = df[(df["Model"] == "GPT-4") & (pd.to_numeric(df["Response tokens"], errors="coerce") > 0)]
    if df.empty:
        raise dataset_error(path, "no GPT-4 row with a positive Response tokens (vLLM's BurstGPT filter)")
    n = ctx.num_requests or len(df)
    sampled = df.sample(n=n, random_state=ctx.seed, replace=n > len(df))
    out: list[Request] = []
    too_long = 0
    for number, (n_in, n_out) in enumerate(zip(sampled["Request tokens"], sampled["Response tokens"])):
        n_in, n_out = max(1, int(n_in)), int(n_out)
        if n_in + n_out > ctx.max_model_len:
            too_long += 1
            continue
        out.append(Request.of_ids(ctx.counter.length_ids(n_in, ctx.seed * 1_000_003 + number), n_out, None))
    if too_long:
        ctx.notes.append(f"{too_long:,} BurstGPT rows skipped: longer than max_model_len {ctx.max_model_len:,}")
    return out
