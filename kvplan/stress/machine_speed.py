"""How fast this machine ran, measured in the run itself, and the prediction rescaled by it.

Every engine step's measured time is divided by the cost model's time for that exact step shape;
the median of those ratios is `machine_speed_ratio` (2.0: steps took twice the calibrated time,
because the machine was busy, throttled or slower than the one calibrated). Scaling the predicted
latencies by it (and throughput by its inverse) separates "the model of the engine is wrong" from
"the machine was slow today": `normalized_error_pct` is the prediction's error after that rescaling.
Process CPU time over wall time shows contention: a busy neighbour leaves this process fewer cores.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvplan.stress.figures import FIGURES, figure_value, prediction_key

MIN_STEPS = 10  # fewer timed steps say nothing about the machine


@dataclass(frozen=True)
class MachineSpeed:
    ratio: float  # median of measured / modelled step time
    p10: float
    p90: float
    num_steps: int
    cpu_busy_cores: float | None  # process CPU seconds per wall second during the run
    cores: int | None

    def figures(self) -> dict[str, Any]:
        return {"machine_speed_ratio": self.ratio, "machine_speed_p10": self.p10, "machine_speed_p90": self.p90,
                "cpu_busy_cores": self.cpu_busy_cores}

    def sentence(self) -> str:
        slower = f"{self.ratio:.2f}x the calibrated step time" if self.ratio >= 1 else f"{1 / self.ratio:.2f}x faster than calibrated"
        cpu = f"; this process kept {self.cpu_busy_cores:.1f} of {self.cores} cores busy" if self.cpu_busy_cores else ""
        verdict = ("machine slower than calibrated (busy or different): compare the speed-normalized errors"
                   if self.ratio > 1.3 else "machine faster than calibrated" if self.ratio < 0.7 else "machine as calibrated")
        return f"machine speed: steps took {slower} (p10-p90 {self.p10:.2f}-{self.p90:.2f}x over {self.num_steps} steps){cpu}: {verdict}"


def machine_speed(cost_model: Any, shapes: Sequence[Any], times_s: Sequence[float], cpu_s: float | None,
                  wall_s: float | None) -> MachineSpeed | None:
    """None without a cost model or enough timed steps."""
    if cost_model is None:
        return None
    pairs = [(t, cost_model.step_s(s)) for s, t in zip(shapes, times_s) if s is not None and t is not None]
    ratios = np.array([t / m for t, m in pairs if m > 0 and t > 0])
    if ratios.size < MIN_STEPS:
        return None
    busy = cpu_s / wall_s if cpu_s is not None and wall_s else None
    return MachineSpeed(float(np.median(ratios)), float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90)),
                        int(ratios.size), busy, os.cpu_count())


def normalized_errors(prediction: Mapping[str, Any], metrics: Mapping[str, Any], ratio: float) -> dict[str, float]:
    """Error % of each predicted time figure after scaling the prediction by the machine's speed:
    times x ratio, rates / ratio. Memory and schedule figures do not depend on speed: left out."""
    out: dict[str, float] = {}
    for f in FIGURES.values():
        if not f.predicted or f.unit not in ("ms", "s", "tok/s", "req/s") or f.group == "memory":
            continue
        p, m = figure_value(prediction, prediction_key(f.name)), figure_value(metrics, f.name)
        if p is None or m is None or m == 0:
            continue
        scaled = p / ratio if f.unit.endswith("/s") else p * ratio
        out[f.name] = 100.0 * (scaled - m) / abs(m)
    return out
