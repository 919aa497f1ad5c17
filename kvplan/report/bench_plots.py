"""vllm bench serve's two plots (vllm/benchmarks/plot.py, 0.19.1), drawn from a run's measured
requests and written beside the vLLM result file:

- `--plot-timeline` -> `<result>.timeline.html`: one row per request from its arrival, the TTFT
  bar, then each inter-token gap coloured green / orange / red below, between and above the two
  `--timeline-itl-thresholds` (ms). vLLM draws it with plotly; here it is one self-contained page
  with an SVG (adjacent gaps of one colour merged into one bar, the first MAX_ROWS requests).
- `--plot-dataset-stats` -> `<result>.dataset_stats.png`: histograms of prompt, output and total
  tokens and the per-request stacked bars, the four panels vLLM draws.
"""
from __future__ import annotations

import html
import io

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure

from kvplan.report.plots import RC, inline_figure
from kvplan.results.record import RequestRecord
from kvplan.results.result import RunResult

TTFT_COLOR = "#636EFA"
ITL_COLORS = ("#109618", "#FF7F0E", "#D62728")  # vLLM's green, orange, red
MAX_ROWS = 2000


def _measured(result: RunResult) -> list[RequestRecord]:
    return [r for r in result.records() if r.status == "ok" and not r.is_warmup and r.first_token_s is not None]


def itl_segments(record: RequestRecord, thresholds_ms: tuple[float, float]) -> list[tuple[float, float, int]]:
    """(start s, end s, colour index) of the request's gaps, adjacent gaps of one colour merged."""
    times = record.token_times_s  # the first is first_token_s
    out: list[tuple[float, float, int]] = []
    for start, end in zip(times, times[1:]):
        gap_ms = (end - start) * 1e3
        kind = 0 if gap_ms < thresholds_ms[0] else 1 if gap_ms < thresholds_ms[1] else 2
        if out and out[-1][2] == kind and out[-1][1] == start:
            out[-1] = (out[-1][0], end, kind)
        else:
            out.append((start, end, kind))
    return out


def timeline_html(result: RunResult, thresholds_ms: tuple[float, float]) -> str:
    records = sorted(_measured(result), key=lambda r: r.arrival_s)[:MAX_ROWS]
    low, high = thresholds_ms
    labels = ("TTFT", f"ITL < {low:g} ms", f"{low:g} ms <= ITL < {high:g} ms", f"ITL >= {high:g} ms")
    with rc_context(RC):
        fig = Figure(figsize=(11, max(2.5, min(40.0, 0.02 * len(records) + 2))))
        ax = fig.add_subplot()
        for row, record in enumerate(records):
            first_s = record.first_token_s if record.first_token_s is not None else record.arrival_s  # kept: not None
            ax.hlines(row, record.arrival_s, first_s, colors=TTFT_COLOR, linewidth=2)  # its TTFT
            for start, end, kind in itl_segments(record, thresholds_ms):
                ax.hlines(row, start, end, colors=ITL_COLORS[kind], linewidth=2)
        for color, label in zip((TTFT_COLOR, *ITL_COLORS), labels):
            ax.plot([], [], color=color, linewidth=4, label=label)
        ax.set_xlabel("time since the run started (s)")
        ax.set_ylabel("request (by arrival)")
        ax.invert_yaxis()
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        figure = inline_figure(fig, "timeline", "request timeline")
    shown = f"the first {len(records):,} of {len(_measured(result)):,}" if len(_measured(result)) > MAX_ROWS \
        else f"{len(records):,}"
    title = html.escape(f"{result.scenario_name}: request timeline")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<h1>{title}</h1><p>{shown} measured requests: TTFT, then inter-token latency by colour "
            f"(thresholds {low:g} and {high:g} ms).</p><img alt='{figure.alt}' style='max-width:100%' "
            f"src='{figure.data_uri}'></body></html>\n")


def dataset_stats_png(result: RunResult) -> bytes:
    records = _measured(result)
    prompt = np.array([r.prompt_tokens for r in records], dtype=float)
    output = np.array([r.output_tokens for r in records], dtype=float)
    with rc_context(RC):
        fig = Figure(figsize=(12, 8))
        axes = fig.subplots(2, 2)
        for ax, values, name, color in ((axes[0][0], prompt, "prompt tokens", "#1f77b4"),
                                        (axes[0][1], output, "output tokens", "#ff7f0e"),
                                        (axes[1][0], prompt + output, "prompt + output tokens", "#2ca02c")):
            ax.hist(values, bins=min(50, max(1, len(values))), color=color, alpha=0.8)
            ax.set_xlabel(name)
            ax.set_ylabel("requests")
            ax.set_title(f"{name}: mean {values.mean():,.0f}" if len(values) else f"{name}: none")
        index = np.arange(len(records))
        axes[1][1].bar(index, prompt, color="#1f77b4", label="prompt", width=1.0)
        axes[1][1].bar(index, output, bottom=prompt, color="#ff7f0e", label="output", width=1.0)
        axes[1][1].set_xlabel("request")
        axes[1][1].set_ylabel("tokens")
        axes[1][1].legend()
        fig.suptitle(f"{result.scenario_name}: {len(records):,} measured requests")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()
