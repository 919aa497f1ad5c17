"""`kvplan predict --explain`: where one request's TTFT and one step's time go, read off the
simulation that made the prediction (no second model).

The request is the one whose TTFT is the run's median (vLLM's `median_ttft_ms`). Its TTFT is cut
at the times the simulation recorded: the request latency outside the engine (a global
coefficient: HTTP, tokenizing, streaming back), the API server's queue (sent -> handed to the
engine), the engine's queue (handed over -> the start of its first scheduled step, the step in
progress included), and its prefill steps (the first chunk's start -> the step that sampled its
first token), which the step-cost model splits by component (GPU work by op, communication, host)
summed over those steps. A decode step is the median decode-only step of the run. With data
parallelism the first replica's requests and steps are explained.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvplan.perf.step_cost import StepCost, StepShape
from kvplan.perf.trace import Trace


@dataclass(frozen=True)
class Explanation:
    request_index: int
    prompt_tokens: int
    ttft_ms: float
    ttft_parts_ms: dict[str, float]  # in order; they sum to ttft_ms
    prefill_steps: int
    prefill_components_ms: dict[str, float]  # the step cost's parts summed over its prefill steps
    decode_step: dict[str, Any] | None  # batch (seqs, context tokens) and components in ms

    def as_dict(self) -> dict[str, Any]:
        return {"request_index": self.request_index, "prompt_tokens": self.prompt_tokens, "ttft_ms": self.ttft_ms,
                "ttft_parts_ms": self.ttft_parts_ms, "prefill_steps": self.prefill_steps,
                "prefill_components_ms": self.prefill_components_ms, "decode_step": self.decode_step}


def _shape(trace: Trace, k: int) -> StepShape:
    return StepShape(num_tokens=trace.step_tokens[k], num_seqs=trace.step_seqs[k],
                     context_tokens=trace.step_context_tokens[k], attention_pairs=trace.step_attention_pairs[k],
                     num_prefill_tokens=trace.step_prefill_tokens[k], num_sampled=trace.step_sampled[k])


def _ms(parts: dict[str, float]) -> dict[str, float]:
    """Seconds to ms; a difference of equal floats (-1e-18) is 0."""
    return {name: 1e3 * float(v) if abs(float(v)) > 1e-12 else 0.0 for name, v in parts.items()}


def explain(trace: Trace, cost: StepCost, request_latency_s: float, num_requests: int) -> Explanation | None:
    """The median-TTFT request of the first `num_requests` (the first replica's), or None when the
    trace recorded no steps (a `plan` probe) or no request sampled."""
    if trace.start_step is None or trace.ready_s is None or len(trace.step_end_s) == 0:
        return None
    first = np.asarray(trace.first_step[:num_requests])
    done = np.flatnonzero(first >= 0)
    if done.size == 0:
        return None
    ttft = trace.first_token_s[done] - trace.send_s[done]
    i = int(done[np.argsort(ttft, kind="stable")[(len(done) - 1) // 2]])
    start, end = int(trace.start_step[i]), int(trace.first_step[i])
    durations = [float(cost.step_s(_shape(trace, k))) for k in range(start, end + 1)]
    start_s = float(trace.step_end_s[start]) - durations[0]
    send_s, ready_s = float(trace.send_s[i]), float(trace.ready_s[i])
    parts = {"request latency (client, HTTP, tokenize; a global coefficient)": request_latency_s,
             "API server queue": max(0.0, ready_s - send_s),
             "engine queue (to its first scheduled step)": max(0.0, start_s - max(send_s, ready_s)),
             "prefill steps (its first chunk to its first token)": float(trace.first_token_s[i]) - start_s}
    components: dict[str, float] = {}
    for k in range(start, end + 1):
        for name, v in cost.components_s(_shape(trace, k)).items():
            components[name] = components.get(name, 0.0) + float(v)
    return Explanation(i, int(trace.prompt_tokens[i]), 1e3 * (float(trace.first_token_s[i]) - send_s
                                                               + request_latency_s),
                       _ms(parts), end - start + 1, _ms(components), _decode_step(trace, cost))


def _decode_step(trace: Trace, cost: StepCost) -> dict[str, Any] | None:
    decodes = np.flatnonzero(trace.step_prefill_tokens == 0)
    if decodes.size == 0:
        return None
    k = int(decodes[np.argsort(trace.step_seqs[decodes], kind="stable")[(len(decodes) - 1) // 2]])
    shape = _shape(trace, k)
    return {"step": k, "num_seqs": int(shape.num_seqs), "context_tokens": int(shape.context_tokens),
            "step_ms": 1e3 * float(cost.step_s(shape)), "components_ms": _ms(cost.components_s(shape))}
