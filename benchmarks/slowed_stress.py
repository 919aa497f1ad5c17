"""`python benchmarks/slowed_stress.py FACTOR kvplan-args...`: `kvplan` with every engine step
made FACTOR times as costly, the way a code regression would: at the end of the model forward
(before the step stamps its tokens) the thread spins until the step has used FACTOR x the CPU
time it had used so far. A benchmark helper (benchmarks/gate_speed.py): kvplan itself has no such switch."""
from __future__ import annotations

import sys
import time


def main() -> None:
    factor = float(sys.argv[1])
    from kvplan.engine.llm_engine import LLMEngine
    from kvplan.engine.model_runner import ModelRunner

    step, run = LLMEngine.step, ModelRunner.run
    started = [0.0]

    def timed_step(self):  # type: ignore[no-untyped-def]
        started[0] = time.thread_time()
        return step(self)

    def slowed_run(self, batch):  # type: ignore[no-untyped-def]
        out = run(self, batch)
        until = time.thread_time() + (factor - 1.0) * (time.thread_time() - started[0])
        while time.thread_time() < until:  # CPU work, not a sleep: a neighbour's load stretches it too
            pass
        return out

    LLMEngine.step, ModelRunner.run = timed_step, slowed_run  # type: ignore[method-assign]
    from kvplan.cli import main as kvplan_main

    kvplan_main(sys.argv[2:])


if __name__ == "__main__":
    main()
