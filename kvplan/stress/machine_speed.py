"""How fast this machine ran, measured in the run itself, and the prediction rescaled by it.

Every engine step's measured time is divided by the cost model's time for that exact step shape.
`machine_speed_ratio` is total measured step time over total modelled step time (2.0: the steps
took twice the calibrated time, because the machine was busy, throttled or slower than the one
calibrated); `machine_speed_median` is the median step's ratio. They part on a shared machine: a
neighbour's time slices land on a minority of steps (p90 2.4x, median 1.2x with two CPU hogs on
two cores), and the run's duration, throughput and mean latencies follow the total, not the median.

The prediction rescaled by that speed (`normalized_error_pct`, the prediction's error after it)
separates "the model of the engine is wrong" from "the machine was slow today". Scaling every
figure by one number would be right for totals and wrong for medians and tails when the slowdown is
lumpy, so the scenario is simulated again with each step's modelled time multiplied by a ratio drawn
from this run's measured ratios on steps of similar length (`SpeedResampled`): the rescaled
prediction sees the same mix of clean and stalled steps the run saw.
Process CPU time over wall time shows contention: a busy neighbour leaves this process fewer cores.

That ratio is measured on the engine, so an engine twice as slow per step also reads 2.0. The
reference kernel (`engine/reference_kernel.py`), timed between steps by `ReferenceSampler`, is
the engine-independent yardstick: `reference_slowdown` (its time now over its time at calibration)
is the machine's share of the ratio, `engine_speed_ratio` the engine's, and latency in units of
its time (`*_ref`, figures group "normalized") is what the gate compares across runs.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvplan.results.figures import FIGURES, NORMALIZED_FROM, figure_value, prediction_key

MIN_STEPS = 10  # fewer timed steps say nothing about the machine
REFERENCE_SHARE = 0.04  # of the engine's step time spent timing the reference kernel
MIN_REFERENCE_SAMPLES = 40  # topped up after the run when the run was too short to take them


class ReferenceSampler:
    """Times the reference kernel between engine steps, once per `1 / share` of accumulated step
    time, so samples spread over the run as the steps do and cost about `share` of it. Each
    sample's wall time and this thread's CPU time during it are kept."""

    def __init__(self, time_once: Callable[[], float], share: float = REFERENCE_SHARE) -> None:
        self.time_once, self.share = time_once, share
        self.times_s: list[float] = []
        self.cpu_s: list[float] = []
        self._owed_s = 0.0
        self._last_s = time_once()  # also a warm-up

    def _sample(self) -> None:
        cpu0 = time.thread_time()
        self._last_s = self.time_once()
        self.cpu_s.append(time.thread_time() - cpu0)
        self.times_s.append(self._last_s)

    def after_step(self, step_s: float) -> None:
        self._owed_s += step_s
        if self._owed_s * self.share >= self._last_s:
            self._owed_s = 0.0
            self._sample()

    def top_up(self, minimum: int = MIN_REFERENCE_SAMPLES) -> None:
        while len(self.times_s) < minimum:
            self._sample()


@dataclass(frozen=True)
class ReferenceTiming:
    """What the run measured of the machine, apart from the engine."""

    times_s: Sequence[float]  # the reference kernel's wall time per sample
    cpu_s: Sequence[float]  # this thread's CPU time per sample
    step_wall_s: float | None = None  # engine steps' total wall time
    step_wait_s: float | None = None  # of which the engine thread waited for a CPU (run_queue.py)
    waits: Any = None  # cpu_waits.CpuWaits: when those waits happened, to take them out request by request

    @property
    def wait_share(self) -> float | None:
        if self.step_wait_s is None or not self.step_wall_s:
            return None
        return min(1.0, max(0.0, self.step_wait_s / self.step_wall_s))

    def figures(
        self, metrics: Mapping[str, Any], wait_free: Mapping[str, Any] | None = None
    ) -> dict[str, float | None]:
        """`reference_kernel_ms` (mean wall), `reference_kernel_cpu_ms`, `cpu_wait_share`, and each
        latency figure as the latency this run would have had with a CPU to itself, in units of the
        reference kernel's CPU time: a neighbour's time slices drop out with the waits, a slower or
        throttled CPU through the kernel, and what is left is the engine. `wait_free`: the run's
        metrics on the wait-free clock (`CpuWaits.records`), each request losing the waits inside
        it; without them, `metrics` x (1 - wait share); without the wait share (not Linux):
        latency over the kernel's wall time."""
        if not self.times_s:
            return {}
        share = self.wait_share
        ref_ms = 1e3 * float(np.mean(self.cpu_s if share is not None and self.cpu_s else self.times_s))
        keep = 1.0 - share if share is not None and wait_free is None else 1.0
        source_metrics = wait_free if wait_free is not None else metrics
        out: dict[str, float | None] = {
            "reference_kernel_ms": 1e3 * float(np.mean(self.times_s)),
            "reference_kernel_cpu_ms": 1e3 * float(np.mean(self.cpu_s)) if self.cpu_s else None,
            "cpu_wait_share": share,
        }
        for name, source in NORMALIZED_FROM.items():
            value = figure_value(source_metrics, source)
            if value is None or ref_ms <= 0:
                continue
            out[name] = value / keep * ref_ms / 1e3 if FIGURES[source].unit == "tok/s" else value * keep / ref_ms
        return out


@dataclass(frozen=True)
class MachineSpeed:
    ratio: float  # total measured / total modelled step time
    median: float  # of the per-step ratios
    p10: float
    p90: float
    num_steps: int
    cpu_busy_cores: float | None  # process CPU seconds per wall second during the run
    cores: int | None
    reference_slowdown: float | None = None  # the machine alone, now against calibration (reference_slowdown())
    step_ratios: tuple[float, ...] = field(default=(), repr=False)  # measured / modelled, per timed step
    step_modelled_s: tuple[float, ...] = field(default=(), repr=False)  # the cost model's time for each

    @property
    def engine_ratio(self) -> float | None:
        return self.ratio / self.reference_slowdown if self.reference_slowdown else None

    def figures(self) -> dict[str, Any]:
        return {"machine_speed_ratio": self.ratio, "machine_speed_median": self.median,
                "machine_speed_p10": self.p10, "machine_speed_p90": self.p90,
                "cpu_busy_cores": self.cpu_busy_cores, "reference_slowdown": self.reference_slowdown,
                "engine_speed_ratio": self.engine_ratio}

    def _cause(self) -> str:
        if self.reference_slowdown is None or self.engine_ratio is None:
            return ""
        ref, eng = self.reference_slowdown, self.engine_ratio
        who = (
            "the engine, not the machine"
            if eng > 1.3 and ref < 1.3
            else "the machine, not the engine"
            if ref > 1.3 and eng < 1.3
            else "both the machine and the engine"
            if ref > 1.3
            else "neither"
        )
        return (
            f"; measured apart from the engine (reference kernel, CPU waits) the machine was {slower_or_faster(ref)} "
            f"than when calibrated, and the engine took {eng:.2f}x the model's time beyond that: {who}"
        )

    def sentence(self) -> str:  # noqa: D401 - one plain sentence for the notes
        slower = (
            f"{self.ratio:.2f}x the calibrated step time"
            if self.ratio >= 1
            else f"{1 / self.ratio:.2f}x faster than calibrated"
        )
        cpu = f"; this process kept {self.cpu_busy_cores:.1f} of {self.cores} cores busy" if self.cpu_busy_cores else ""
        verdict = (
            "machine slower than calibrated (busy or different): compare the speed-normalized errors"
            if self.ratio > 1.3
            else "machine faster than calibrated"
            if self.ratio < 0.7
            else "machine as calibrated"
        )
        return (f"machine speed: steps took {slower} in total (median step {self.median:.2f}x, p10-p90 "
                f"{self.p10:.2f}-{self.p90:.2f}x over {self.num_steps} steps)"
                f"{cpu}: {verdict}{self._cause()}")


def reference_slowdown(cost_model: Any, reference: Mapping[str, Any]) -> float | None:
    """How much slower than at calibration this machine ran the engine's steps, measured apart
    from the engine: the reference kernel's CPU time against the calibration's, and the share of
    step time spent waiting for a CPU here (the calibration's fit has its waits taken out already).
    None when either side lacks the figures."""
    cal_ms, ref_ms = (
        getattr(cost_model, "reference_kernel_cpu_ms", None),
        figure_value(reference, "reference_kernel_cpu_ms"),
    )
    if not cal_ms or not ref_ms:
        return None
    wait_here = figure_value(reference, "cpu_wait_share") or 0.0
    return (ref_ms / cal_ms) / max(1e-3, 1.0 - wait_here)


def machine_speed(cost_model: Any, shapes: Sequence[Any], times_s: Sequence[float], cpu_s: float | None,
                  wall_s: float | None, reference: Mapping[str, Any] | None = None) -> MachineSpeed | None:
    """None without a cost model or enough timed steps. `reference`: this run's reference figures
    (`ReferenceTiming.figures`), set against the calibration's (`reference_slowdown`)."""
    if cost_model is None:
        return None
    pairs = np.array([(t, m) for t, m in ((t, cost_model.step_s(s)) for s, t in zip(shapes, times_s)
                                          if s is not None and t is not None) if m > 0 and t > 0]).reshape(-1, 2)
    if len(pairs) < MIN_STEPS:
        return None
    ratios = pairs[:, 0] / pairs[:, 1]
    busy = cpu_s / wall_s if cpu_s is not None and wall_s else None
    slowdown = reference_slowdown(cost_model, reference) if reference else None
    return MachineSpeed(float(pairs[:, 0].sum() / pairs[:, 1].sum()), float(np.median(ratios)),
                        float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90)), len(ratios), busy,
                        os.cpu_count(), slowdown, tuple(float(r) for r in ratios), tuple(float(m) for m in pairs[:, 1]))


class SpeedResampled:
    """A cost model whose every step takes the base model's time x a ratio measured in the run on a
    step of about that modelled length. A neighbour's time slice adds milliseconds, not a factor:
    short steps either run clean or double, long ones absorb the same waits as a smaller share, so
    the measured steps are split by modelled time into equal-count bins and each simulated step
    draws from its bin. Within a bin every measured ratio is used in turn, in an order fixed by
    `seed`, so the rescaled prediction is reproducible."""

    def __init__(self, base: Any, modelled_s: Sequence[float], ratios: Sequence[float], seed: int = 0,
                 steps_per_bin: int = 16) -> None:
        order = np.argsort(np.asarray(modelled_s, dtype=float), kind="stable")
        modelled, measured = np.asarray(modelled_s, dtype=float)[order], np.asarray(ratios, dtype=float)[order]
        bins = max(1, min(8, len(measured) // steps_per_bin))
        rng = np.random.default_rng(seed)
        self.base = base
        self.bins = [rng.permutation(part) for part in np.array_split(measured, bins)]
        # upper modelled time of each bin but the last: a step's bin by binary search
        self.edges = np.array([part[-1] for part in np.array_split(modelled, bins)[:-1]])
        self._next = [0] * bins

    def step_s(self, shape: Any) -> float:
        modelled = float(self.base.step_s(shape))
        return modelled * self._ratio(modelled)

    def components_s(self, shape: Any) -> dict[str, float]:
        """The base model's parts, each x the ratio drawn for the whole step."""
        ratio = self._ratio(float(self.base.step_s(shape)))
        return {k: v * ratio for k, v in self.base.components_s(shape).items()}

    def _ratio(self, modelled_s: float) -> float:
        b = int(np.searchsorted(self.edges, modelled_s))
        ratios = self.bins[b]
        ratio = ratios[self._next[b] % len(ratios)]
        self._next[b] += 1
        return float(ratio)


def normalized_errors(
    prediction: Mapping[str, Any], metrics: Mapping[str, Any], ratio: float = 1.0
) -> dict[str, float]:
    """Error % of each predicted time figure after scaling the prediction by the machine's speed:
    times x ratio, rates / ratio (ratio 1: `prediction` is rescaled already, by `SpeedResampled`).
    Memory and schedule figures do not depend on speed: left out."""
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


def slower_or_faster(ratio: float) -> str:
    """A time ratio (measured / reference) in words: '2.43x slower', '1.25x faster', 'as fast'."""
    if ratio >= 1.005:
        return f"{ratio:.2f}x slower"
    if ratio <= 0.995:
        return f"{1 / ratio:.2f}x faster"
    return "as fast"
