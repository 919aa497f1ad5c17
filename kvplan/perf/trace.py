"""What one scheduler simulation did (`Trace`: per-step shapes and clock, per-request step indices
and times), and data-parallel replicas' traces as one run."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass
class Trace:
    """What the simulation did: per-step shapes and clock, per-request step indices and times."""

    step_tokens: np.ndarray
    step_seqs: np.ndarray
    step_prefill_tokens: np.ndarray
    step_context_tokens: np.ndarray  # sum over scheduled requests of tokens attended (cached + new)
    step_attention_pairs: np.ndarray  # causal query x key pairs (`step_cost.causal_pairs`): the quadratic prefill term
    step_sampled: np.ndarray  # requests that sampled a token (lm_head rows)
    step_end_s: np.ndarray
    send_step: np.ndarray  # steps completed when the request was sent
    send_s: np.ndarray
    first_step: np.ndarray
    last_step: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    last_token_s: np.ndarray
    itl_s: np.ndarray  # every inter-token gap (the ITL samples of `vllm bench serve`)
    peak_used_blocks: int = 0
    max_running: int = 0
    num_preemptions: int = 0
    timed_arrivals: bool = False  # True: the step sequence depends on the clock
    extras: dict = field(default_factory=dict)
    start_step: np.ndarray | None = None  # each request's first scheduled step (its first prefill chunk)
    ready_s: np.ndarray | None = None  # when the API server handed it to the engine


PER_REQUEST = ("send_s", "prompt_tokens", "output_tokens", "first_token_s", "last_token_s", "itl_s")


def merge_traces(traces: list[Trace]) -> Trace:
    """Data-parallel replicas as one run: every replica's requests (their per-request arrays side by
    side), the first replica's steps, the peaks of any and the preemptions of all. The step indices
    of the requests (send/first/last step) are the first replica's only, so the result is for
    figures, not for retiming."""
    first = traces[0]
    merged = {name: np.concatenate([getattr(t, name) for t in traces]) for name in PER_REQUEST}
    n0 = len(first.send_s)
    index = {
        name: np.concatenate(
            [getattr(first, name), np.zeros(len(merged["send_s"]) - n0, dtype=getattr(first, name).dtype)]
        )
        for name in ("send_step", "first_step", "last_step")
    }
    return replace(
        first,
        **merged,
        **index,
        peak_used_blocks=max(t.peak_used_blocks for t in traces),
        max_running=max(t.max_running for t in traces),
        num_preemptions=sum(t.num_preemptions for t in traces),
        timed_arrivals=any(t.timed_arrivals for t in traces),
        extras={**first.extras, "missed_slo": any(t.extras.get("missed_slo") for t in traces),
                **_summed(traces, "prefix_cache")},
    )


def _summed(traces: list[Trace], key: str) -> dict[str, dict[str, int]]:
    """{key: each counter summed over the replicas} when the first replica has `key` in its extras."""
    if key not in traces[0].extras:
        return {}
    return {key: {name: sum(t.extras[key][name] for t in traces) for name in traces[0].extras[key]}}
