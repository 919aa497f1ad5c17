"""The prediction table as one picture: each figure's prediction error, (predicted - measured) /
measured (the sign and number the stress table and the gate print), drawn as predicted / measured
bars from 1 on a log axis labelled in that error, green within tolerance and red outside, with each
row's tolerance band drawn behind its bar and the error written at its end.

A ratio on a log scale shows a 3 ms figure that came in at 9 ms and a 1,500 ms one that came in at
1,400 ms side by side, which bars of the values on one linear axis cannot (the small one vanishes).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure

from kvplan.gate.agreement import Agreement
from kvplan.report.plots import RC, InlineFigure, inline_figure

PASS, MISS, BAND = "#1b7f3b", "#b42318", "#d9dde5"
MAX_RATIO = 1e4  # a figure measured 0 or near it: drawn at the edge, not off to infinity


def predicted_over_measured(row: Agreement) -> float | None:
    """predicted / measured = 1 + the prediction's error; None when either is missing or the measured is 0."""
    if row.predicted is None or row.measured is None or row.measured == 0:
        return None
    ratio = row.predicted / row.measured
    if ratio <= 0 or not math.isfinite(ratio):
        return 1 / MAX_RATIO if ratio <= 0 else MAX_RATIO
    return min(MAX_RATIO, max(1 / MAX_RATIO, ratio))


def band(tolerance_pct: float) -> tuple[float, float]:
    """predicted / measured within the tolerance: |(p - m) / m| <= t  <=>  1 - t <= p/m <= 1 + t."""
    t = tolerance_pct / 100.0
    return max(1.0 - t, 1.0 / MAX_RATIO), 1.0 + t


def _error_label(ratio: float, _: object = None) -> str:
    return "0" if abs(ratio - 1.0) < 1e-9 else f"{(ratio - 1.0) * 100:+.3g}%"


def ratio_figure(rows: Sequence[Agreement]) -> InlineFigure | None:
    """One horizontal bar per judged row, in the table's order (top to bottom)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    drawn = [(r, q) for r in rows if r.judged and (q := predicted_over_measured(r)) is not None]
    if not drawn:
        return None
    with rc_context(RC):
        fig = Figure(figsize=(8.5, 0.8 + 0.26 * len(drawn)))
        ax = fig.add_subplot()
        y = np.arange(len(drawn))[::-1]
        for yi, (r, q) in zip(y, drawn):
            lo, hi = band(r.tolerance_pct)
            ax.barh(yi, hi - lo, left=lo, height=0.8, color=BAND, zorder=1)
            color = PASS if r.status == "pass" else MISS
            ax.barh(yi, q - 1.0, left=1.0, height=0.5, color=color, zorder=2)
            ax.plot([q], [yi], marker="o", markersize=4, color=color, zorder=4)  # an exact row has no bar, still a dot
            if r.error_pct is not None:
                ax.annotate(
                    f"{r.error_pct:+.1f}%",
                    (q, yi),
                    xytext=(6 if q >= 1 else -6, 0),
                    textcoords="offset points",
                    ha="left" if q >= 1 else "right",
                    va="center",
                    fontsize=7,
                    color=color,
                    zorder=5,
                )
        ax.axvline(1.0, color="black", linewidth=0.8, zorder=3)
        ax.set_xscale("log")
        values = [q for _, q in drawn]
        ax.set_xlim(min(0.5, min(values) / 2.5), max(2.0, max(values) * 2.5))
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(_error_label))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
        ax.set_yticks(y, [r.label for r, _ in drawn])
        ax.set_xlabel("prediction error, (predicted − measured) ÷ measured, on a log scale of predicted ÷ measured "
                      "(grey: the row's tolerance)")
        ax.grid(axis="y", visible=False)
        return inline_figure(
            fig,
            "prediction_ratio",
            "The prediction's error for every compared figure, on a log scale, "
            "coloured within (green) or outside (red) its tolerance",
            "Right of 0: kvplan predicted more than the run measured (slower, bigger); left: less. "
            "The same signed error as the table and the gate.",
            wide=False,
        )
