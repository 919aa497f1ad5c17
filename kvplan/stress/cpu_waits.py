"""`CpuWaits`: when, during a run, the engine's thread sat waiting for a CPU, so latencies can be
given as they would have been with a CPU to itself.

A busy neighbour's time slices land on a minority of steps (two CPU hogs on two cores: median step
1.2x its modelled time, p90 2.4x), so scaling a median latency by the run's average wait share
misses by the lumpiness. Instead the runner marks, at each step's start and end, the cumulative
run-queue wait of its thread (`run_queue.py`); between marks the wait is spread evenly. Every time
in a request's record is moved back by the wait before it (`t - W(t)`), so each TTFT, ITL and E2E
loses exactly the waits that fell inside it, and nothing else.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import overload

import numpy as np

from kvplan.results.record import RequestRecord


@dataclass(frozen=True)
class CpuWaits:
    times_s: tuple[float, ...]  # run clock (0 = run start), non-decreasing
    waited_s: tuple[float, ...]  # cumulative run-queue wait at each time, from 0

    @classmethod
    def from_marks(cls, marks: Sequence[tuple[float, float]]) -> CpuWaits | None:
        """None without two marks: nothing to spread."""
        if len(marks) < 2:
            return None
        t = np.maximum.accumulate(np.array([m[0] for m in marks], dtype=float))
        w = np.array([m[1] for m in marks], dtype=float)
        w = np.maximum.accumulate(np.maximum(w - w[0], 0.0))
        # a wait is elapsed time: never more of it between two marks than time passed (the two
        # clocks are read a few microseconds apart); keeps w non-decreasing (see the test)
        w = np.minimum.accumulate(w - t) + t
        return cls(tuple(float(x) for x in t), tuple(float(x) for x in w))

    @property
    def total_s(self) -> float:
        return self.waited_s[-1] if self.waited_s else 0.0

    @overload
    def wait_free(self, t_s: float) -> float: ...

    @overload
    def wait_free(self, t_s: None) -> None: ...

    def wait_free(self, t_s: float | None) -> float | None:
        """`t_s` with the waits before it taken out."""
        if t_s is None:
            return None
        return float(t_s - np.interp(t_s, self.times_s, self.waited_s, left=0.0, right=self.total_s))

    def records(self, records: Iterable[RequestRecord]) -> list[RequestRecord]:
        """The records as they would read on the wait-free clock."""
        out = []
        for r in records:
            times = tuple(self.wait_free(t) for t in r.token_times_s)
            out.append(replace(r, arrival_s=self.wait_free(r.arrival_s), first_token_s=self.wait_free(r.first_token_s),
                               token_times_s=times, finish_s=self.wait_free(r.finish_s)))
        return out
