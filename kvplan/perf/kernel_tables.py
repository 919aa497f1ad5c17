"""Measured per-kernel GPU timings (AIConfigurator's vLLM collections) as interpolating grids.

Where the data comes from: `aiconfigurator-core` (Apache-2.0; `pip install "kvplan[kernels]"`)
ships, per system, parquet tables of vLLM kernels timed on real GPUs:
    systems/data/<system>/<op>/vllm/<version>/<op>_perf.parquet
(GEMM per dtype, context and generation attention, MoE, custom all-reduce). `KVPLAN_KERNEL_DATA`
points at another directory of the same layout (CSV files allowed: the tests carry a small copy).
The package's modules are never imported (its data directory is found without running it).

A `LogGrid` interpolates a table multilinearly in log space over its numeric axes; along every
axis the latency is made non-decreasing first, each point lowered to the smallest latency at any
larger point (more work never takes less time: a slow outlier, such as a kernel ill-suited to a
tiny shape, is dropped, and every step cost stays monotone in its work); beyond the largest point of an axis
the latency grows in proportion (beyond the largest GEMM `m`, twice the rows take twice the time).
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from kvplan.errors import KvplanError

# kvplan's catalog name -> AIConfigurator's system directory (GPUs it has measured)
AIC_SYSTEMS = {
    "h100-sxm-80gb": "h100_sxm", "h100-pcie-80gb": "h100_pcie", "h200-sxm-141gb": "h200_sxm",
    "b200-sxm-180gb": "b200_sxm", "a100-sxm4-80gb": "a100_sxm", "a100-pcie-80gb": "a100_pcie",
    "l40s": "l40s", "l4": "l4", "b300-sxm-288gb": "b300_sxm", "gb200-186gb": "gb200", "gb300-279gb": "gb300",
    "rtx-pro-6000-server": "rtx_pro_6000_server",
}
DATA_ENV = "KVPLAN_KERNEL_DATA"


def data_root() -> Path | None:
    """`$KVPLAN_KERNEL_DATA`, else aiconfigurator-core's systems/data when it is installed, else None."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    try:
        found = importlib.util.find_spec("aiconfigurator_core")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    root = Path(next(iter(found.submodule_search_locations))) / "systems" / "data"
    return root if root.is_dir() else None


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in name.replace("rc", ".").split("."))


@dataclass(frozen=True)
class TableRef:
    frame: Any  # pandas.DataFrame
    source: str  # "aiconfigurator-core data h100_sxm/gemm vllm 0.24.0"
    vllm_version: str | None = None  # the vLLM build the table was measured on (None: not a vLLM collection)


def load_table(root: Path, system: str, op: str, file_stem: str, framework: str = "vllm") -> TableRef | None:
    """The newest `framework` collection of one table (parquet or CSV), or None when not measured."""
    import pandas as pd

    base = root / system / op / framework
    if not base.is_dir():
        return None
    for version in sorted((p.name for p in base.iterdir() if p.is_dir()), key=_version_key, reverse=True):
        for suffix, read in ((".parquet", pd.read_parquet), (".csv", pd.read_csv)):
            path = base / version / f"{file_stem}{suffix}"
            if path.is_file():
                return TableRef(_read(read, path), f"{system}/{op} {framework} {version}",
                                version if framework == "vllm" else None)
    return None


def _read(read: Any, path: Path) -> Any:
    """One table; a parquet file without pyarrow (tables given by $KVPLAN_KERNEL_DATA to an install
    without the kernels extra) is a one-line error, not an internal one."""
    try:
        return read(path)
    except ImportError as exc:
        raise KvplanError(f"reading the measured kernel table {path.name} needs pyarrow (not installed): "
                          "pip install 'kvplan[kernels]'; --perf-model roofline needs no tables") from exc


class LogGrid:
    """Latency over a full grid of positive numeric axes, interpolated in log space."""

    def __init__(self, frame: Any, axes: list[str], value: str = "latency") -> None:
        grouped = frame.groupby(axes, as_index=False)[value].min()  # several kernels: the one vLLM would pick
        self.axes = axes
        self.points = [np.unique(grouped[a].to_numpy(dtype=float)) for a in axes]
        shape = tuple(len(p) for p in self.points)
        grid = np.full(shape, np.nan)
        idx = tuple(np.searchsorted(p, grouped[a].to_numpy(dtype=float)) for a, p in zip(axes, self.points))
        grid[idx] = grouped[value].to_numpy(dtype=float)
        grid = _fill_nan(grid)
        for axis in range(grid.ndim):  # more work is never faster: a point is at most any larger one
            grid = np.flip(np.minimum.accumulate(np.flip(grid, axis), axis=axis), axis)  # (slow outliers drop)
        self.grid = grid
        self.log_points = [np.log(p) for p in self.points]

    def __call__(self, *values: float) -> float:
        """Interpolated latency (ms) at one point; linear growth beyond the largest point of an axis."""
        scale = 1.0
        weights: list[tuple[int, int, float]] = []
        for v, pts, logp in zip(values, self.points, self.log_points):
            v = max(float(v), pts[0])
            if v > pts[-1]:
                scale *= v / pts[-1]
                v = pts[-1]
            if len(pts) == 1:
                weights.append((0, 0, 0.0))
                continue
            hi = int(min(max(np.searchsorted(pts, v), 1), len(pts) - 1))
            t = (np.log(v) - logp[hi - 1]) / (logp[hi] - logp[hi - 1])
            weights.append((hi - 1, hi, float(t)))
        total = 0.0
        for corner in range(1 << len(weights)):
            w, index = 1.0, []
            for bit, (lo, hi, t) in enumerate(weights):
                upper = (corner >> bit) & 1
                w *= t if upper else 1.0 - t
                index.append(hi if upper else lo)
            if w:
                total += w * self.grid[tuple(index)]
        return total * scale

    def batch(self, *values: np.ndarray) -> np.ndarray:
        """`__call__` at many points at once (the arrays broadcast): the interpolation vectorized. Kept
        apart from `__call__`, whose plain-float path is several times faster for one point (most
        lookups, e.g. a step's GEMMs) and need not match this one bit for bit."""
        arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values))
        scale = np.ones(arrays[0].shape)
        weights: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for v, pts, logp in zip(arrays, self.points, self.log_points):
            v = np.maximum(v, pts[0])
            scale = scale * np.where(v > pts[-1], v / pts[-1], 1.0)
            v = np.minimum(v, pts[-1])
            if len(pts) == 1:
                zero = np.zeros(v.shape, dtype=np.intp)
                weights.append((zero, zero, np.zeros(v.shape)))
                continue
            hi = np.clip(np.searchsorted(pts, v), 1, len(pts) - 1)
            weights.append((hi - 1, hi, (np.log(v) - logp[hi - 1]) / (logp[hi] - logp[hi - 1])))
        total = np.zeros(arrays[0].shape)
        for corner in range(1 << len(weights)):
            w = np.ones(arrays[0].shape)
            index = []
            for bit, (lo, hi, t) in enumerate(weights):
                upper = (corner >> bit) & 1
                w = w * (t if upper else 1.0 - t)
                index.append(hi if upper else lo)
            total = total + w * self.grid[tuple(index)]
        return total * scale


def _fill_nan(grid: np.ndarray) -> np.ndarray:
    """Missing grid points take the nearest measured neighbour along each axis in turn."""
    out = grid.copy()
    for axis in range(out.ndim):
        if not np.isnan(out).any():
            break
        moved = np.moveaxis(out, axis, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        for row in flat:
            ok = ~np.isnan(row)
            if ok.any() and not ok.all():
                row[~ok] = np.interp(np.flatnonzero(~ok), np.flatnonzero(ok), row[ok])
        out = np.moveaxis(flat.reshape(moved.shape), -1, axis)
    return np.nan_to_num(out, nan=float(np.nanmax(out)) if not np.isnan(out).all() else 0.0)


@lru_cache(maxsize=8)
def system_tables(system: str, root: str) -> dict[str, TableRef]:
    """Every table kvplan uses for one system (missing ones are absent)."""
    wanted = {
        "gemm": ("gemm", "gemm_perf", "vllm"),
        "context_attention": ("attention", "context_attention_perf", "vllm"),
        "generation_attention": ("attention", "generation_attention_perf", "vllm"),
        "moe": ("moe", "moe_perf", "vllm"),
        "allreduce": ("comm", "custom_allreduce_perf", "vllm"),
        "nccl": ("comm", "nccl_perf", "nccl"),
    }  # NCCL's own collectives (all-gather, reduce-scatter)
    out = {}
    for name, (op, stem, framework) in wanted.items():
        ref = load_table(Path(root), system, op, stem, framework)
        if ref is not None:
            out[name] = ref
    return out


def kernels_missing(gpu_name: str) -> str | None:
    """Why the measured kernels cannot time `gpu_name` (None: they can): the tables are not
    installed, AIConfigurator never measured the GPU, or its folder holds no vLLM GEMM table
    (aiconfigurator-core 0.12 ships empty a100_pcie, h100_pcie and l4 folders)."""
    root = data_root()
    if root is None:
        return "the measured kernels are not installed (pip install 'kvplan[kernels]')"
    system = AIC_SYSTEMS.get(gpu_name)
    if system is None:
        return f"AIConfigurator measured no {gpu_name}; measured: {', '.join(measured_gpus())}"
    if "gemm" not in system_tables(system, str(root)):
        return f"the installed kernel tables hold no vLLM GEMM table for {gpu_name} (its folder {system} is empty)"
    return None


def measured_gpus() -> list[str]:
    """The catalog GPUs whose vLLM kernel tables are installed."""
    root = data_root()
    if root is None:
        return []
    return sorted(g for g, system in AIC_SYSTEMS.items() if "gemm" in system_tables(system, str(root)))


def kernels_available(gpu_name: str) -> bool:
    """Whether aiconfigurator-core's tables are installed and hold this GPU's vLLM kernels."""
    return kernels_missing(gpu_name) is None
