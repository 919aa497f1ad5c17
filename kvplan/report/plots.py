"""The report's figures: matplotlib, rendered to SVG and inlined as `data:` URIs in `<img>` tags.

Why SVG in `<img>`: the file stays self-contained and sharp at any zoom; an SVG inside `<img>`
runs no script even if user text (class names) got into it; and a test can check that every
figure loaded by decoding its URI. No pyplot: `Figure` objects carry no global state, so nothing
here depends on (or changes) the process's GUI backend; SVG output needs no display (Agg-safe).

Long series are decimated (min and max per bucket, so peaks survive) and CDFs are drawn from a
few hundred quantiles: a 250-request run stays far below the report's 3 MB budget.
"""
from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure

from kvplan.results.record import RequestRecord
from kvplan.results.result import RunResult
from kvplan.units import MIB

MAX_POINTS = 1200  # per line; min+max bucketing keeps the peaks
CDF_POINTS = 300
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
# legends beside the axes, never over the curves
OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}
PREDICTED_STYLE: dict[str, Any] = {"linestyle": "--", "linewidth": 1.4}
RC: dict[Any, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "kvplan",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
}


@dataclass(frozen=True)
class InlineFigure:
    """One figure ready for `<img src=...>`; `alt` and `caption` are plain text (the template escapes)."""

    key: str
    data_uri: str
    alt: str
    caption: str = ""
    wide: bool = True  # stretched to the page width (timelines); False: natural size (small bar charts)


def inline_figure(fig: Figure, key: str, alt: str, caption: str = "", wide: bool = True) -> InlineFigure:
    buf = io.BytesIO()
    # Date=None: the same result renders to the same bytes (diffable reports)
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    uri = "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return InlineFigure(key, uri, alt, caption, wide)


def time_buckets(
    t_s: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, max_points: int = MAX_POINTS
) -> list[int]:
    """Indices of at most ~max_points samples: the time axis cut into equal buckets, each keeping
    its lowest and highest sample (in time order), so no peak, dip or queue burst is lost however
    unevenly the samples fall in time (an engine samples every step, and steps vary 100x)."""
    t, y = np.asarray(t_s, dtype=float), np.asarray(values, dtype=float)
    if t.size <= max_points:
        return list(range(t.size))
    n = max(1, max_points // 2)
    edges = np.linspace(t.min(), t.max(), n + 1)
    bucket = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n - 1)
    keep: set[int] = {0, t.size - 1}
    order = np.argsort(bucket, kind="stable")
    for idx in np.split(order, np.flatnonzero(np.diff(bucket[order])) + 1):
        keep.update((int(idx[np.argmin(y[idx])]), int(idx[np.argmax(y[idx])])))
    return sorted(keep)


def decimate(
    t_s: Sequence[float], values: Sequence[float], max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """At most ~max_points points, min and max per time bucket (see `time_buckets`)."""
    t, y = np.asarray(t_s, dtype=float), np.asarray(values, dtype=float)
    keep = time_buckets(t, y, max_points)
    return t[keep], y[keep]


# the simulator's timeline spells the engine counters as SimSample does (num_running, ...)
KEY_ALIASES = {"running": "num_running", "waiting": "num_waiting", "preemptions": "num_preemptions",
               "prefix_hit_tokens": "num_prefix_hit_tokens"}


def _series(samples: Iterable[Any], key: str, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(t_s, value/scale) of the samples that have `key` (or its alias); dicts or TimelineSamples."""
    pts = []
    alias = KEY_ALIASES.get(key, key)
    for s in samples:
        d = s if isinstance(s, dict) else s.model_dump()
        value = d.get(key) if d.get(key) is not None else d.get(alias)
        if value is not None and d.get("t_s") is not None:
            pts.append((float(d["t_s"]), float(value) / scale))
    if not pts:
        return np.empty(0), np.empty(0)
    t, v = zip(*pts)
    return decimate(t, v)


@dataclass(frozen=True)
class ClockMap:
    """The prediction's simulated clock mapped onto the run's: predicted t_s x `factor`, so the
    predicted timeline spans the measured one and the shapes can be compared on one axis (a slow
    machine stretches the whole run; the stretch itself is the machine speed's business)."""

    factor: float

    @property
    def label(self) -> str:
        return "" if self.factor == 1.0 else f", simulated clock x{self.factor:.3g}"


def clock_map(result: RunResult) -> ClockMap:
    """Stretch the predicted timeline to end where the measured one ends (engine timeline, else
    the server's samples); x1 when either is missing."""
    predicted = [float(t) for t in _series(result.prediction.get("timeline") or [], "t_s")[0]]
    measured = [s.t_s for s in result.timeline] or [
        float(t) for d in result.server_telemetry if (t := d.get("t_s")) is not None
    ]
    if not predicted or not measured or max(predicted) <= 0 or max(measured) <= 0:
        return ClockMap(1.0)
    return ClockMap(max(measured) / max(predicted))


def pool_bytes(result: RunResult) -> int | None:
    """The KV pool size: measured, else predicted, else blocks x bytes per block."""
    for source in (result.metrics, result.prediction, result.server_info):
        if source.get("kv_pool_bytes"):
            return int(source["kv_pool_bytes"])
    for source in (result.metrics, result.prediction, result.server_info):
        if source.get("num_gpu_blocks") and source.get("bytes_per_block"):
            return int(source["num_gpu_blocks"]) * int(source["bytes_per_block"])
    return None


def kv_memory_figure(result: RunResult) -> InlineFigure | None:
    """KV bytes in use over time: measured (engine accounting), predicted (simulated clock), the
    pool line, and for HTTP targets the server's own kv_cache_usage_perc."""
    measured = _series(result.timeline, "kv_bytes_used", MIB)
    clock = clock_map(result)
    t_pred, v_pred = _series(result.prediction.get("timeline") or [], "kv_bytes_used", MIB)
    predicted = (t_pred * clock.factor, v_pred)
    server = _series(result.server_telemetry, "kv_cache_usage_perc")
    if not (measured[0].size or predicted[0].size or server[0].size):
        return None
    pool = pool_bytes(result)
    with rc_context(RC):
        fig = Figure(figsize=(9.5, 3.6))
        ax = fig.add_subplot()
        if measured[0].size:
            ax.step(*measured, where="post", color=COLORS[0], linewidth=1.2, label="measured (engine)")
        if predicted[0].size:
            ax.step(*predicted, where="post", color=COLORS[1], label=f"predicted{clock.label}", **PREDICTED_STYLE)
        if server[0].size:
            if pool:  # the server reports a fraction; with a known pool it is bytes like the rest
                ax.plot(server[0], server[1] * pool / MIB, color=COLORS[2], linewidth=1.2, marker=".", markersize=3,
                        label="server kv_cache_usage_perc x pool")
            else:
                ax2 = ax.twinx()
                ax2.plot(
                    *server,
                    color=COLORS[2],
                    linewidth=1.2,
                    marker=".",
                    markersize=3,
                    label="server kv_cache_usage_perc",
                )
                ax2.set_ylim(0, 1.05)
                ax2.grid(False)
                ax2.set_ylabel("server KV usage (fraction)")
                ax2.legend(loc="upper right", bbox_to_anchor=(1.0, -0.2))
        if pool:
            ax.axhline(pool / MIB, color="black", linewidth=1.0, linestyle=":", label=f"KV pool {pool / MIB:,.1f} MiB")
        ax.set_xlabel("time since run start (s)")
        ax.set_ylabel("KV cache in use (MiB)")
        ax.set_ylim(bottom=0)
        # with a second y axis on the right, the legends go below the plot instead
        ax.legend(**(OUTSIDE if pool or not server[0].size else {"loc": "upper left", "bbox_to_anchor": (0.0, -0.2)}))
        return inline_figure(
            fig,
            "kv_memory",
            "KV cache bytes in use over time, predicted vs measured, with the pool size",
            "Measured: engine block accounting per step. Predicted: the planner's simulation, its clock "
            f"stretched x{clock.factor:.3g} to end with the run, so the shapes line up.",
        )


def engine_load_figure(result: RunResult) -> InlineFigure | None:
    """Running and waiting requests (top) and cumulative preemptions (bottom), measured vs predicted."""
    clock = clock_map(result)
    pred = [{**d, "t_s": float(d["t_s"]) * clock.factor} for d in result.prediction.get("timeline") or []
            if isinstance(d, dict) and d.get("t_s") is not None]
    lines = {
        ("running", "measured"): _series(result.timeline, "running"),
        ("waiting", "measured"): _series(result.timeline, "waiting"),
        ("running", "predicted"): _series(pred, "running"),
        ("waiting", "predicted"): _series(pred, "waiting"),
        ("running", "server"): _series(result.server_telemetry, "num_requests_running"),
        ("waiting", "server"): _series(result.server_telemetry, "num_requests_waiting"),
    }
    preempt = {"measured": _series(result.timeline, "preemptions"), "predicted": _series(pred, "preemptions")}
    if not any(v[0].size for v in (*lines.values(), *preempt.values())):
        return None
    colors = {"running": COLORS[0], "waiting": COLORS[3]}
    styles: dict[str, dict[str, Any]] = {
        "measured": {"linewidth": 1.2},
        "predicted": PREDICTED_STYLE,
        "server": {"linewidth": 1.0, "linestyle": ":"},
    }
    with rc_context(RC):
        fig = Figure(figsize=(9.5, 4.6))
        top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2.2, 1]})
        for (what, source), (t, v) in lines.items():
            if t.size:
                top.step(t, v, where="post", color=colors[what], label=f"{what} ({source})", **styles[source])
        top.set_ylabel("requests")
        top.set_ylim(bottom=0)
        top.yaxis.get_major_locator().set_params(integer=True)
        top.legend(**OUTSIDE)
        for source, (t, v) in preempt.items():
            if t.size:
                bottom.step(t, v, where="post", color=COLORS[4] if source == "measured" else COLORS[1],
                            label=f"preemptions ({source})", **styles[source])
        bottom.set_ylabel("preemptions\n(cumulative)")
        bottom.set_xlabel("time since run start (s)")
        bottom.set_ylim(0, max(1.0, *(float(v.max()) for _, v in preempt.values() if v.size)) * 1.1)
        bottom.yaxis.get_major_locator().set_params(integer=True)
        bottom.legend(**OUTSIDE)
        return inline_figure(fig, "engine_load", "Running and waiting requests and cumulative preemptions over time",
                       f"Dashed: predicted, its simulated clock stretched x{clock.factor:.3g} to end with the run.")


def _cdf(values_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(values_ms)
    if v.size > CDF_POINTS:  # the quantiles, not every sample: same curve, a fraction of the bytes
        q = np.linspace(0.0, 1.0, CDF_POINTS)
        return np.quantile(v, q), q
    return v, np.arange(1, v.size + 1) / v.size


def latency_values_ms(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """TTFT, ITL (pooled gaps) and E2E in ms over ok, non-warmup records: what the metrics use."""
    ok = [r for r in records if r.status == "ok" and not r.is_warmup]
    return {
        "ttft": np.array([r.ttft_s for r in ok if r.ttft_s is not None], dtype=float) * 1000.0,
        "itl": (np.concatenate([r.itl_s for r in ok]) if ok else np.empty(0)) * 1000.0,
        "e2el": np.array([r.e2e_s for r in ok if r.e2e_s is not None], dtype=float) * 1000.0,
    }


def latency_cdf_figure(records: Sequence[RequestRecord], slo_ms: dict[str, float]) -> InlineFigure | None:
    """CDFs of TTFT, ITL and E2E: all requests, and each class; dotted lines at the SLO limits."""
    classes = list(dict.fromkeys(r.class_name for r in records if not r.is_warmup))
    groups = {"all": latency_values_ms(records)}
    if len(classes) > 1:
        groups.update({c: latency_values_ms([r for r in records if r.class_name == c]) for c in classes})
    if not any(v.size for g in groups.values() for v in g.values()):
        return None
    titles = {"ttft": "TTFT (ms)", "itl": "ITL, pooled token gaps (ms)", "e2el": "E2E latency (ms)"}
    slo_key = {"ttft": "ttft", "itl": "itl", "e2el": "e2e"}
    with rc_context(RC):
        fig = Figure(figsize=(11, 3.4))
        axes = fig.subplots(1, 3, sharey=True)
        for ax, metric in zip(axes, titles):
            for i, (name, values) in enumerate(groups.items()):
                if values[metric].size:
                    x, y = _cdf(values[metric])
                    ax.step(x, y, where="post", color="black" if name == "all" else COLORS[i % len(COLORS)],
                            linewidth=1.6 if name == "all" else 1.1, label=name)
            limit = slo_ms.get(slo_key[metric])
            top = float(groups["all"][metric].max()) if groups["all"][metric].size else 0.0
            if limit is not None and limit <= 1.5 * top:
                ax.axvline(limit, color=COLORS[3], linestyle=":", linewidth=1.2, label=f"SLO {limit:g} ms")
            elif limit is not None:  # a far-off limit would squash the curve into one edge
                ax.text(0.98, 0.04, f"SLO {limit:g} ms: off scale", transform=ax.transAxes, ha="right", color=COLORS[3])
            positive = groups["all"][metric][groups["all"][metric] > 0]
            if positive.size and positive.max() / positive.min() > 50:  # long tails: log x shows both ends
                ax.set_xscale("log")
            ax.set_xlabel(titles[metric])
        axes[0].set_ylabel("fraction of requests (ITL: of gaps)")
        axes[0].set_ylim(0, 1.02)
        axes[-1].legend(loc="lower right")
        return inline_figure(fig, "latency_cdf", "CDFs of TTFT, ITL and E2E latency per request class",
                       "Completed, non-warmup requests; ITL pools every gap between consecutive tokens.")


@dataclass(frozen=True)
class BarRow:
    label: str
    predicted: float
    measured: float
    unit: str  # "MiB", "ms", "requests", ...


def prediction_bars_figure(rows: Sequence[BarRow]) -> InlineFigure | None:
    """Grouped bars, predicted vs measured, one panel per unit (MiB next to ms would hide one)."""
    units = list(dict.fromkeys(r.unit for r in rows))
    if not units:
        return None
    with rc_context(RC):
        fig = Figure(figsize=(3.2 * len(units) + 1.2, 3.4))
        axes = np.atleast_1d(fig.subplots(1, len(units), squeeze=False)[0])
        for ax, unit in zip(axes, units):
            sub = [r for r in rows if r.unit == unit]
            x = np.arange(len(sub))
            ax.bar(x - 0.2, [r.predicted for r in sub], 0.4, color=COLORS[1], label="predicted")
            ax.bar(x + 0.2, [r.measured for r in sub], 0.4, color=COLORS[0], label="measured")
            ax.set_xticks(x, [r.label for r in sub], rotation=30, ha="right")
            positive = [v for r in sub for v in (r.predicted, r.measured) if v > 0]
            if unit == "ms" and positive:  # 3 ms beside 1,500 ms: on a linear axis the small bars vanish
                ax.set_yscale("log")
                ax.set_ylim(min(positive) / 2, max(positive) * 2)
            ax.set_ylabel(unit + (" (log scale)" if ax.get_yscale() == "log" else ""))
        axes[-1].legend(**OUTSIDE)
        return inline_figure(
            fig, "prediction_bars", "Bars of predicted vs measured figures, latencies on a log scale", wide=False
        )


def allocator_figure(results: dict[str, RunResult]) -> InlineFigure | None:
    """Paged vs contiguous on the same pool: running requests and KV in use over time, overlaid."""
    with rc_context(RC):
        fig = Figure(figsize=(11, 3.4))
        left, right = fig.subplots(1, 2)
        drawn = False
        for i, (allocator, result) in enumerate(results.items()):
            t, running = _series(result.timeline, "running")
            tk, kv = _series(result.timeline, "kv_bytes_used", MIB)
            if t.size:
                left.step(t, running, where="post", color=COLORS[i], label=allocator)
                drawn = True
            if tk.size:
                right.step(tk, kv, where="post", color=COLORS[i], label=allocator)
                drawn = True
        if not drawn:
            return None
        pool = next((p for p in (pool_bytes(r) for r in results.values()) if p), None)
        if pool:
            right.axhline(pool / MIB, color="black", linestyle=":", linewidth=1.0, label="KV pool")
        left.set_ylabel("running requests")
        right.set_ylabel("KV cache in use (MiB)")
        for ax in (left, right):
            ax.set_xlabel("time since run start (s)")
            ax.set_ylim(bottom=0)
        right.legend(**OUTSIDE)
        return inline_figure(
            fig, "allocators", "Paged vs contiguous allocator: running requests and KV memory over time"
        )
