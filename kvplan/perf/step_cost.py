"""One step-cost interface for every simulation: `step_s(shape)`, the seconds one engine step takes
for a batch of this `StepShape`, and `components_s(shape)`, the same seconds by named part. Every
cost model implements it: the GPU roofline (`kvplan.perf.gpu_cost.GpuStepModel`), the measured
kernels (`kvplan.perf.kernel_cost.KernelStepModel`) and the bundled engine's calibrated CPU model
(`kvplan.stress.cpu_cost.LinearCostModel`). `kvplan.perf.cost_models.step_cost` is the one factory of
the GPU models, so `predict`, `plan` and a GPU `stress` run time steps the same way for a `--perf-model`.

A shape's fields are numbers, or numpy arrays of many steps' numbers (a decode stretch, a trace
re-timed at once): the models' arithmetic is elementwise.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol


class StepShape(NamedTuple):
    """A scheduled batch reduced to the numbers its cost depends on (a tuple: the scheduler makes
    one per step, so it must be cheap to build)."""

    num_tokens: Any  # new tokens computed this step (prefill chunks + one per decode)
    num_seqs: Any  # sequences in the batch
    context_tokens: Any  # sum over sequences of the tokens attended to (cached + new)
    attention_pairs: Any  # causal query x key pairs over the sequences (`causal_pairs`): the quadratic prefill term
    num_prefill_tokens: Any = 0
    num_sampled: Any = None  # requests that sample a token (LM-head rows); None: every one scheduled
    num_prefill_seqs: Any = None  # requests with a prefill chunk; None: one if any token is a prefill's
    prefill_pairs: Any = None  # the prefill chunks' query x key pairs; None: all pairs not of one-token decodes

    @property
    def sampled(self) -> Any:
        return self.num_seqs if self.num_sampled is None else self.num_sampled

    @classmethod
    def from_counts(cls, contexts_before: list[int], new_tokens: list[int], sampled: int | None = None) -> StepShape:
        """The shape of a batch whose requests hold `contexts_before` tokens and compute `new_tokens`
        (the bundled engine's batches: `kvplan stress` predicts and calibrates with these, `predict`'s
        scheduler builds the same numbers inline)."""
        pairs = [causal_pairs(c, n) for c, n in zip(contexts_before, new_tokens)]
        chunks = [(n, p) for n, p in zip(new_tokens, pairs) if n > 1]
        return cls(num_tokens=sum(new_tokens), num_seqs=len(new_tokens),
                   context_tokens=sum(contexts_before) + sum(new_tokens), attention_pairs=sum(pairs),
                   num_prefill_tokens=sum(n for n, _ in chunks), num_sampled=sampled,
                   num_prefill_seqs=len(chunks), prefill_pairs=sum(p for _, p in chunks))

    def features(self) -> list[float]:
        return [float(self.num_tokens), float(self.num_seqs), float(self.context_tokens), float(self.attention_pairs)]


def causal_pairs(cached: int, new: int) -> int:
    """The query x key pairs of `new` tokens computed after `cached` ones under a causal mask (what
    flash attention computes): new token i attends to cached + i keys, n*c + n(n+1)/2 in all, taken
    as n * (c + (n+1)//2): exact for odd n, n/2 fewer for even n; a decode (n = 1) attends to c + 1."""
    return new * (cached + (new + 1) // 2)


class StepCost(Protocol):
    def step_s(self, shape: StepShape) -> Any: ...

    def components_s(self, shape: StepShape) -> dict[str, float]: ...
