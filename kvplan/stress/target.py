"""`Target`: what a stress run drives, and `TargetRun`, the typed record it hands back.

Two targets exist: the bundled engine in this process (`targets/engine_target.py`) and any
OpenAI-compatible server over HTTP (`targets/http_target.py`). The driver (`driver.py`) does the
rest the same way for both: the prediction before the run, the metrics after it, the result.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvplan.engine.config import Allocator
from kvplan.results.record import RequestRecord
from kvplan.results.result import Environment, TimelineSample
from kvplan.stress.scenario import Scenario
from kvplan.workload.request import Request


@dataclass(frozen=True)
class Pool:
    """The KV pool the prediction is made for; `num_gpu_blocks` None: unknown before the run."""

    num_gpu_blocks: int | None
    bytes_per_block: int


@dataclass
class TargetRun:
    """What one run measured. `memory` holds the target's memory and engine figures, named as in
    `figures.py` (group "memory"); latency and throughput come from `records` in the driver."""

    records: list[RequestRecord]
    timeline: list[TimelineSample]
    memory: dict[str, Any]
    environment: Environment
    complete: bool = True
    notes: list[str] = field(default_factory=list)
    server_telemetry: list[dict[str, Any]] = field(default_factory=list)
    server_info: dict[str, Any] = field(default_factory=dict)
    # engine targets: each step's batch shape and measured time (start to the next step's start,
    # runner.EngineRun.step_cycle_s), and the process's CPU vs wall time, so the driver can tell how
    # fast this machine ran against the cost model
    step_shapes: list[Any] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    cpu_s: float | None = None
    wall_s: float | None = None
    reference: Any = None  # machine_speed.ReferenceTiming: the machine measured apart from the engine


class Target(Protocol):
    allocator: Allocator  # what the result is labelled with
    label: str  # shown on the progress bar
    device_name: str | None  # the GPU's name when the target runs on one this process can see

    def pool(self) -> Pool: ...

    def run(self, scenario: Scenario, requests: list[Request], on_progress: Callable[[int], None]) -> TargetRun: ...
