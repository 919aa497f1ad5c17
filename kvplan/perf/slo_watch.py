"""`SloWatch`: stops a simulation once its SLO percentile is sure to be missed (a `plan` or
`plan-sessions` search needs only meets / misses of a configuration that misses)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvplan.results.slo import Slo


@dataclass
class SloWatch:
    """Tells a simulation to stop once an SLO's percentile is sure to be missed: when more requests
    are over a limit than the percentile may leave above it. numpy's percentile (linear) is at least
    the value of rank floor((n - 1) p / 100), so n - that rank values over the limit decide it."""

    slo: Slo
    latency_s: float  # added to every token time outside the engine (Timings.of)
    ttft_allowed: int  # requests over the TTFT limit that settle nothing yet
    tpot_allowed: int
    ttft_over: int = 0
    tpot_over: int = 0

    @classmethod
    def of(cls, slo: Slo, latency_s: float, requests: list[Any]) -> SloWatch:
        def allowed(n: int) -> int:
            return n - math.floor((n - 1) * slo.percentile / 100) - 1 if n else 1 << 62

        return cls(slo, latency_s, allowed(len(requests)), allowed(sum(1 for r in requests if r.output_tokens > 1)))

    def first_token(self, send_s: float, first_s: float) -> bool:
        if (first_s + self.latency_s - send_s) * 1e3 > (self.slo.ttft_ms or math.inf):
            self.ttft_over += 1
        return self.ttft_over > self.ttft_allowed

    def finished(self, first_s: float, last_s: float, output_tokens: int) -> bool:
        if (last_s - first_s) / (output_tokens - 1) * 1e3 > (self.slo.tpot_ms or math.inf):
            self.tpot_over += 1
        return self.tpot_over > self.tpot_allowed

