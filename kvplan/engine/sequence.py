"""`Sequence`: one request's tokens, block table, progress and timestamps."""
from __future__ import annotations

from enum import Enum, auto
from typing import TYPE_CHECKING

from kvplan.engine.sampling_params import SamplingParams

if TYPE_CHECKING:  # the scheduler and its simulation run without torch; only the engine sets a generator
    import torch


class SequenceStatus(Enum):
    WAITING = auto()  # queued, or preempted by recompute (KV dropped)
    RUNNING = auto()  # holds blocks in the device pool
    SWAPPED = auto()  # preempted by swap: KV parked in the CPU pool
    FINISHED = auto()


class Sequence:
    """A request as the scheduler sees it.

    `token_ids` holds prompt then generated ids; `num_computed_tokens` of them have K/V in the
    pool (or were taken from the prefix cache). Times are `time.perf_counter()` seconds, the
    engine's clock: `arrival_time_s`, `first_scheduled_time_s`, and one entry of
    `token_times_s` per generated token (when it was sampled).
    """

    def __init__(self, seq_id: int, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                 arrival_time_s: float) -> None:
        self.seq_id = seq_id
        self.request_id = request_id
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.token_ids)
        self.params = params
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.block_table: list[int] = []  # logical block i -> physical block id (device or, when swapped, CPU pool)
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache at the last admission
        self.block_hashes: list[int] = []  # chained hashes of full blocks (BlockManager memo; tokens never change)
        self.arrival_time_s = arrival_time_s
        self.first_scheduled_time_s: float | None = None
        self.token_times_s: list[float] = []
        self.finish_reason: str | None = None  # "stop" | "length" | "abort"
        self.num_preemptions = 0
        self.generator: torch.Generator | None = None  # set when the request has its own seed

    def __len__(self) -> int:
        return len(self.token_ids)

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.status.name}, tokens={len(self)}, "
                f"computed={self.num_computed_tokens}, blocks={len(self.block_table)})")

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def block_tokens(self, index: int, block_size: int) -> list[int]:
        """Token ids held by logical block `index`."""
        return self.token_ids[index * block_size:(index + 1) * block_size]

    def append_token(self, token_id: int, time_s: float) -> None:
        self.token_ids.append(token_id)
        self.token_times_s.append(time_s)
