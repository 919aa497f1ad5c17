"""`StepProbe`: records the shape of every batch an `LLMEngine` schedules, next to its wall time.

The engine's stats say how long a step took; the probe adds what the step computed (tokens,
sequences, attended context) so the cost model can be fitted (`kvplan calibrate`) and checked
against a real run. It wraps the scheduler's `schedule` method of one engine instance; nothing
in the engine changes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.perf.step_cost import StepShape

if TYPE_CHECKING:
    from kvplan.engine.llm_engine import LLMEngine


class StepProbe:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.shapes: list[StepShape] = []
        scheduler = engine.scheduler
        original = scheduler.schedule

        def schedule():  # same signature and result; records the shape first
            batch = original()
            self.shapes.append(StepShape.from_counts([s.num_computed_tokens for s in batch.seqs],
                                                     list(batch.num_new_tokens)))
            return batch

        setattr(scheduler, "schedule", schedule)  # noqa: B010 - an instance attribute shadows the method

    @property
    def last(self) -> StepShape | None:
        return self.shapes[-1] if self.shapes else None
