"""`kvplan sweep`: capacity over a grid of ctx x concurrency x KV dtype x block size x GPU.

The memory budget (`plan_capacity`) depends only on (KV dtype, block size, GPU) in vLLM V1 (the
pool is sized from memory, so it does not depend on max_model_len), so it is computed once per such
combination; everything that depends on ctx and concurrency is numpy broadcasting. Imports
numpy/pandas at module level: only the `sweep` command imports this module.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from kvplan.errors import KvplanError
from kvplan.plan import overheads as oh
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec

MAX_POINTS = 10_000_000  # ~1 GiB of table
MAX_INT64 = 2**62  # products above this would wrap in numpy's int64

COLUMNS = ("gpu", "kv_cache_dtype", "block_size", "ctx", "concurrency", "available_kv_cache_bytes", "num_gpu_blocks",
           "blocks_per_request", "kv_cache_tokens", "max_concurrency", "kv_needed_bytes", "fits_one_request", "fits")


def _blocks_per_request(groups, ctx: np.ndarray, mnbt: int) -> np.ndarray:
    """Sum over groups of vLLM's per-request block need, vectorised over ctx."""
    return sum((g.count * g.blocks_per_request(ctx, mnbt) for g in groups), np.zeros_like(ctx))


def _one_request_bytes(groups, ctx: np.ndarray, mnbt: int) -> np.ndarray:
    """vLLM's "KV cache is needed" for one request of ctx tokens, summed over layers."""
    return sum(
        (g.layers * g.blocks_per_request(ctx, mnbt) * g.page_bytes for g in groups), np.zeros(ctx.shape, dtype=np.int64)
    )


def _check_range(groups, ctx_max: int, conc_max: int, mnbt: int, block_bytes: int) -> None:
    """The largest products the grid forms, in Python integers: refused before numpy would wrap."""
    blocks = sum(int(g.count) * int(g.blocks_per_request(ctx_max, mnbt)) for g in groups)
    one = sum(int(g.layers) * int(g.blocks_per_request(ctx_max, mnbt)) * int(g.page_bytes) for g in groups)
    if max(conc_max * blocks * int(block_bytes), one, conc_max * ctx_max) > MAX_INT64:
        raise KvplanError(f"--ctx {ctx_max:,} x --concurrency {conc_max:,} needs more than 2^62 bytes of KV cache; "
                          "that is not a capacity plan")


def sweep(spec: ModelSpec, *, ctx_tokens: Sequence[int], concurrency: Sequence[int], kv_cache_dtypes: Sequence[str],
          block_sizes: Sequence[int], gpus: Sequence[GpuSpec], base: EngineArgs | None = None) -> pd.DataFrame:
    """One row per grid point; `fits` = one request of ctx fits and `concurrency` requests fit."""
    base = base or EngineArgs()
    for name, values in (("--ctx", ctx_tokens), ("--concurrency", concurrency), ("--block-size", block_sizes)):
        if not len(values) or min(values) <= 0:
            raise KvplanError(f"{name} needs one or more positive integers, got {list(values)}")
    if not gpus or not kv_cache_dtypes:
        raise KvplanError("a sweep needs at least one --gpu and one --kv-cache-dtype")
    points = len(set(ctx_tokens)) * len(set(concurrency)) * len(kv_cache_dtypes) * len(block_sizes) * len(gpus)
    if points > MAX_POINTS:
        raise KvplanError(f"the sweep has {points:,} grid points; at most {MAX_POINTS:,}: use fewer values")
    version = oh.parse_vllm_version(base.vllm_version)
    ctx = np.asarray(sorted(set(ctx_tokens)), dtype=np.int64)
    conc = np.asarray(sorted(set(concurrency)), dtype=np.int64)
    cc, nn = (a.ravel() for a in np.meshgrid(ctx, conc, indexing="ij"))
    frames = []
    for gpu in gpus:
        for kv in kv_cache_dtypes:
            for bs in block_sizes:
                plan = plan_capacity(spec, replace(base, gpu=gpu, kv_cache_dtype=kv, block_size=int(bs),
                                                   max_model_len=int(ctx.max())))
                groups, mnbt = plan.groups, plan.max_num_batched_tokens
                _check_range(groups, int(ctx.max()), int(conc.max()), mnbt, plan.block_bytes)
                per_req = _blocks_per_request(groups, cc, mnbt)
                max_conc = plan.num_gpu_blocks / per_req
                if version >= oh.TOKENS_FROM_CONCURRENCY_SINCE:
                    tokens = np.floor(max_conc * cc).astype(np.int64)
                else:
                    min_block = min((g.block_size for g in groups), default=int(bs))  # hybrids: the raised block
                    tokens = np.full(
                        cc.shape, (plan.num_gpu_blocks // max(1, sum(g.count for g in groups))) * min_block
                    )
                one = _one_request_bytes(groups, cc, mnbt)
                fits_one = (one <= plan.available_kv_cache_bytes) & (plan.available_kv_cache_bytes > 0)
                frames.append(pd.DataFrame({
                    "gpu": gpu.name, "kv_cache_dtype": kv, "block_size": int(bs), "ctx": cc, "concurrency": nn,
                    "available_kv_cache_bytes": plan.available_kv_cache_bytes, "num_gpu_blocks": plan.num_gpu_blocks,
                    "blocks_per_request": per_req, "kv_cache_tokens": tokens, "max_concurrency": max_conc,
                    "kv_needed_bytes": nn * per_req * plan.block_bytes, "fits_one_request": fits_one,
                    "fits": fits_one & (nn <= max_conc),
                }))
    df = pd.concat(frames, ignore_index=True)
    for col in ("gpu", "kv_cache_dtype"):
        df[col] = df[col].astype("category")
    return df


def plot_concurrency(df: pd.DataFrame, path: str | Path, title: str = "") -> bytes:
    """The image file's bytes (PNG, SVG, PDF, ... by `path`'s extension): max concurrency vs context,
    one line per KV dtype (one panel per GPU, first block size). Rendered in memory, so a bad format
    is refused before any file is written."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = list(df["gpu"].cat.categories if hasattr(df["gpu"], "cat") else df["gpu"].unique())
    bs = int(df["block_size"].min())
    fig, axes = plt.subplots(1, len(gpus), figsize=(5.5 * len(gpus), 4.2), squeeze=False)
    base = df[(df["block_size"] == bs)].drop_duplicates(["gpu", "kv_cache_dtype", "ctx"])
    for ax, gpu in zip(axes[0], gpus):
        sub = base[base["gpu"] == gpu]
        for kv, line in sub.groupby("kv_cache_dtype", observed=True):
            ax.plot(line["ctx"], line["max_concurrency"], marker="o", label=f"KV {kv}")
        ax.set_xscale("log", base=2)
        if (sub["max_concurrency"] > 0).any():  # a GPU the model never fits on: all zeros, kept linear
            ax.set_yscale("log")
        ax.set_xlabel("context (max_model_len, tokens)")
        ax.set_ylabel("max concurrency (vLLM)")
        ax.set_title(f"{gpu}, block {bs}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=_image_format(fig, Path(path)), dpi=110)
    finally:
        plt.close(fig)
    return buf.getvalue()


def _image_format(fig: object, path: Path) -> str:
    formats = fig.canvas.get_supported_filetypes()  # type: ignore[attr-defined]
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in formats:
        raise KvplanError(f"--plot {path}: unknown image format {path.suffix or '(no extension)'!r}; "
                          f"choices: {', '.join('.' + f for f in sorted(formats))}")
    return fmt
