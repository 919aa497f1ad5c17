"""`vllm bench serve`'s figures from a simulated trace (same names and definitions: TPOT excludes
the first token; ITL is every gap between consecutive tokens of a request)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvplan.perf.trace import Trace

BENCH_KEYS = ("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
              "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
              "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
              "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")


@dataclass(frozen=True)
class Timings:
    """Per-request send, first-token and last-token times (s) of one simulated run."""

    send_s: np.ndarray
    first_s: np.ndarray
    last_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    @classmethod
    def of(cls, trace: Trace, request_latency_s: float = 0.0) -> Timings:
        """`request_latency_s`: what a request spends outside the engine's steps (HTTP, tokenizing,
        streaming), added to every token time of it; it does not occupy the GPU."""
        return cls(trace.send_s, trace.first_token_s + request_latency_s, trace.last_token_s + request_latency_s,
                   trace.prompt_tokens, trace.output_tokens)

    @classmethod
    def retimed(cls, trace: Trace, step_durations_s: np.ndarray, request_latency_s: float = 0.0) -> Timings:
        """The same step sequence with other step durations; valid only without timed arrivals."""
        end = np.cumsum(step_durations_s)
        send = np.where(trace.send_step > 0, end[np.maximum(trace.send_step - 1, 0)], 0.0)
        return cls(send, end[trace.first_step] + request_latency_s, end[trace.last_step] + request_latency_s,
                   trace.prompt_tokens, trace.output_tokens)

    @property
    def duration_s(self) -> float:
        return float(self.last_s.max() - min(0.0, float(self.send_s.min()))) if len(self.last_s) else 0.0

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_s - self.send_s

    @property
    def tpot_s(self) -> np.ndarray:
        many = self.output_tokens > 1
        return (self.last_s[many] - self.first_s[many]) / (self.output_tokens[many] - 1)

    def headline(self) -> tuple[float, float, float]:
        """(output tokens/s, mean TPOT s, mean TTFT s): what the fit compares."""
        tpot = self.tpot_s
        return (float(self.output_tokens.sum() / max(self.duration_s, 1e-12)), float(tpot.mean()) if len(tpot) else 0.0,
                float(self.ttft_s.mean()))


def _ms(values: np.ndarray, stat: str) -> float | None:
    if not len(values):
        return None
    if stat == "mean":
        return float(values.mean() * 1e3)
    return float(np.percentile(values, 50 if stat == "median" else 99) * 1e3)


def bench_figures(trace: Trace, request_latency_s: float = 0.0, goodput_ms: dict[str, float] | None = None
                  ) -> dict[str, Any]:
    """The keys `vllm bench serve --save-result` writes, from the simulation's own clock; with
    `goodput_ms` ({ttft, tpot, e2el: limit}) also its request_goodput: requests meeting every limit
    per second (a one-token request's TPOT is 0, as vLLM counts it)."""
    t = Timings.of(trace, request_latency_s)
    duration = t.duration_s or 1e-12
    out: dict[str, Any] = {
        "duration": t.duration_s, "completed": int(len(t.send_s)), "total_input_tokens": int(t.prompt_tokens.sum()),
        "total_output_tokens": int(t.output_tokens.sum()), "request_throughput": len(t.send_s) / duration,
        "output_throughput": float(t.output_tokens.sum()) / duration,
        "total_token_throughput": float(t.output_tokens.sum() + t.prompt_tokens.sum()) / duration,
    }
    e2el = t.last_s - t.send_s
    if goodput_ms:
        tpot = np.zeros(len(t.send_s))
        many = t.output_tokens > 1
        tpot[many] = t.tpot_s
        good = np.ones(len(t.send_s), dtype=bool)
        for key, values in (("ttft", t.ttft_s), ("tpot", tpot), ("e2el", e2el)):
            if key in goodput_ms:
                good &= values * 1e3 <= goodput_ms[key]
        out["request_goodput"] = float(good.sum()) / duration
    for name, values in (("ttft", t.ttft_s), ("tpot", t.tpot_s), ("itl", trace.itl_s), ("e2el", e2el)):
        for stat in ("mean", "median", "p99"):
            out[f"{stat}_{name}_ms"] = _ms(values, stat)
    return out
