"""Step-failure isolation: one poisoned request fails alone, the engine keeps serving.

When the forward or the sampler raises for a batch of several sequences, each sequence of the
batch is run again on its own (same tokens, same blocks, random generators rewound to where the
batch found them), so the culprit is found and the innocent ones get their token this step, as
they would have. A batch of one is its own culprit. Finding the culprit costs one forward per
sequence, only in a step that failed.

A failed forward may have written K/V into the slots of this step's new tokens; nothing reads
them before they are written again (a retried sequence rewrites them, a failed one frees its
blocks, and no block is registered in the prefix cache before its step succeeds).

What cannot be blamed on a request (the scheduler or a swap copy raising) leaves the pool's
contents or the queues unknown: `EngineDeadError`, and the engine must not be stepped again.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kvplan.engine.scheduler import ScheduledBatch
from kvplan.engine.sequence import Sequence


class EngineDeadError(RuntimeError):
    """The engine's state can no longer be trusted (not a request's fault)."""


@dataclass
class StepResult:
    """What one step computed: chunks that ran, tokens sampled, and the sequences that failed."""

    ran: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, tokens computed)
    sampled: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, new token id)
    failed: list[tuple[Sequence, str]] = field(default_factory=list)  # (sequence, error message)
    num_retried: int = 0  # sequences run again alone because their batch failed


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def swap_blocks(kv_cache: Any, batch: ScheduledBatch) -> None:
    """The batch's swap copies (swap-outs first, before anything reuses the freed device blocks)."""
    try:
        kv_cache.swap_out(batch.blocks_to_swap_out)
        kv_cache.swap_in(batch.blocks_to_swap_in)
    except Exception as exc:  # noqa: BLE001 - half-copied blocks: no request can be trusted any more
        raise EngineDeadError(f"swapping KV blocks failed: {describe(exc)}") from exc


def _generator_states(runner: Any, seqs: tuple[Sequence, ...]) -> list[tuple[torch.Generator, torch.Tensor]]:
    gens = [runner.sampler.generator] + [s.generator for s in seqs if s.generator is not None]
    return [(g, g.get_state()) for g in gens]


def run_isolated(runner: Any, batch: ScheduledBatch) -> StepResult:
    """Run `batch` (its swaps already done); on failure, each sequence again alone."""
    plain = replace(batch, blocks_to_swap_out=(), blocks_to_swap_in=())
    states = _generator_states(runner, batch.seqs)
    try:
        seqs, tokens = runner.run(plain)
        return StepResult(list(zip(batch.seqs, batch.num_new_tokens)), list(zip(seqs, tokens)))
    except Exception as exc:  # noqa: BLE001 - whatever a request made the model or sampler raise
        if len(batch.seqs) == 1:
            return StepResult(failed=[(batch.seqs[0], describe(exc))])
    result = StepResult(num_retried=len(batch.seqs))
    for gen, state in states:  # rewind: each row then draws what it would have drawn in the batch
        gen.set_state(state)
    for seq, n in zip(batch.seqs, batch.num_new_tokens):
        try:
            seqs, tokens = runner.run(ScheduledBatch((seq,), (n,)))
        except Exception as exc:  # noqa: BLE001 - this one is a culprit
            result.failed.append((seq, describe(exc)))
            continue
        result.ran.append((seq, n))
        result.sampled.extend(zip(seqs, tokens))
    return result
