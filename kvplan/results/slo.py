"""`Slo`: the latency a deployment promises, at a percentile: time to first token, time per output
token, a request's own inter-token latency, end to end. A request meets it when every limit given
holds (goodput counts those); `kvplan plan` searches for configurations that meet TTFT and TPOT."""
from __future__ import annotations

import math

from pydantic import Field

from kvplan.errors import KvplanError
from kvplan.validation import StrictModel


class Slo(StrictModel):
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    itl_ms: float | None = Field(default=None, gt=0)  # per request: the `percentile` of its own token gaps
    e2e_ms: float | None = Field(default=None, gt=0)
    percentile: float = Field(default=99.0, gt=0, le=100)

    @property
    def limits_ms(self) -> dict[str, float]:
        return {
            k: v
            for k, v in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("itl", self.itl_ms), ("e2e", self.e2e_ms))
            if v is not None
        }


def plan_slo(ttft_ms: float, tpot_ms: float, percentile: float = 99.0) -> Slo:
    """`kvplan plan`'s SLO from its flags, each bad value named by its flag."""
    if not ttft_ms > 0 or not tpot_ms > 0:
        raise KvplanError(f"SLOs must be positive, got --slo-ttft-ms {ttft_ms} and --slo-tpot-ms {tpot_ms}")
    if not 0 < percentile <= 100:
        raise KvplanError(f"--slo-percentile must be in (0, 100], got {percentile}")
    return Slo(ttft_ms=ttft_ms, tpot_ms=tpot_ms, percentile=percentile)


GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # `vllm bench serve --goodput KEY:MS`'s keys


def goodput_ms(key: str, value: str) -> float:
    """One `--goodput KEY:VALUE` limit in milliseconds, checked as vLLM checks it."""
    if key not in GOODPUT_METRICS:
        raise KvplanError(f"--goodput {key!r}: choose from {', '.join(GOODPUT_METRICS)} (KEY:MILLISECONDS)")
    try:
        ms = float(value)
    except ValueError:
        raise KvplanError(f"--goodput {key}:{value[:40]!r}: the value is milliseconds, a number") from None
    if not (math.isfinite(ms) and ms >= 0):
        raise KvplanError(f"--goodput {key}:{value[:40]!r}: a non-negative number of milliseconds")
    return ms


def parse_goodput(items: list[str]) -> dict[str, float]:
    """`ttft:500 tpot:50` (one item each, or comma-separated in one) as {metric: ms}."""
    out: dict[str, float] = {}
    for item in (part for text in items for part in text.replace(",", " ").split()):
        key, found, value = item.partition(":")
        if not found or not key.strip():
            raise KvplanError(f"--goodput takes KEY:MILLISECONDS pairs ({', '.join(GOODPUT_METRICS)}), "
                              f"got {item[:60]!r}")
        out[key.strip()] = goodput_ms(key.strip(), value.strip())
    return out
