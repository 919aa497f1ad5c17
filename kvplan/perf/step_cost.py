"""One step-cost interface for every simulation: `step_s(shape)`, the seconds one engine step takes
for a batch of this shape. The bundled engine on a CPU is timed by its calibrated linear model
(`kvplan.stress.cpu_cost`); a GPU by the physical model of `kvplan.perf.gpu_cost`, the same one
`kvplan predict` and `kvplan plan` use, so a GPU stress run tests what `predict` says.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kvplan.perf.gpu_cost import GpuStepModel


@dataclass(frozen=True)
class StepShape:
    """A scheduled batch reduced to the numbers its cost depends on."""

    num_tokens: int  # new tokens computed this step (prefill chunks + one per decode)
    num_seqs: int  # sequences in the batch
    context_tokens: int  # sum over sequences of the tokens attended to (cached + new)
    attention_pairs: int  # sum over sequences of new_tokens x context: the quadratic prefill term
    num_prefill_tokens: int = 0

    @classmethod
    def from_counts(cls, contexts_before: list[int], new_tokens: list[int]) -> StepShape:
        ctx = [c + n for c, n in zip(contexts_before, new_tokens)]
        return cls(num_tokens=sum(new_tokens), num_seqs=len(new_tokens), context_tokens=sum(ctx),
                   attention_pairs=sum(n * c for n, c in zip(new_tokens, ctx)),
                   num_prefill_tokens=sum(n for n in new_tokens if n > 1))

    def features(self) -> list[float]:
        return [float(self.num_tokens), float(self.num_seqs), float(self.context_tokens), float(self.attention_pairs)]


class StepCost(Protocol):
    def step_s(self, shape: StepShape) -> float: ...


@dataclass(frozen=True)
class GpuShapeCost:
    """`GpuStepModel` behind the shape interface. A shape does not say which requests sample a
    token, so every scheduled request is counted as sampling one (the LM head of a prefill chunk
    that does not finish its prompt is over-counted: one vocab-wide row per such request)."""

    model: GpuStepModel

    def step_s(self, shape: StepShape) -> float:
        if shape.num_seqs == 0:
            return 0.0
        return float(self.model.step_s(shape.num_tokens, shape.num_seqs, shape.num_prefill_tokens, shape.context_tokens,
                                       shape.attention_pairs, shape.num_seqs))
