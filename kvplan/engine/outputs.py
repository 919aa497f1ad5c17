"""What the engine reports: `RequestOutput` per request per step and `EngineStats` per step.

Times are `time.perf_counter()` seconds (the engine's clock); pass arrival times on that clock.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestOutput:
    """Tokens a request got in one step. The finishing output also carries the whole history."""

    request_id: str
    new_token_ids: tuple[int, ...]
    new_token_times_s: tuple[float, ...]
    num_prompt_tokens: int
    num_output_tokens: int
    finished: bool
    finish_reason: str | None = None  # "stop" (EOS or a stop id), "length" (max_tokens or max_model_len), "error"
    output_token_ids: tuple[int, ...] = ()  # when finished: every generated id
    token_times_s: tuple[float, ...] = ()  # when finished: when each generated id was sampled
    arrival_time_s: float = 0.0
    first_scheduled_time_s: float | None = None
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache (last admission)
    num_preemptions: int = 0
    error: str | None = None  # finish_reason "error": why its step failed (kvplan.engine.isolation)


@dataclass(frozen=True)
class EngineStats:
    """The engine after one `step()`: queues, blocks, KV bytes and this step's events."""

    step: int
    time_s: float  # perf_counter() at the end of the step
    step_time_s: float  # wall time of the step (schedule + forward + sample)
    num_running: int
    num_waiting: int
    num_swapped: int
    num_blocks_total: int
    num_blocks_used: int  # ref count > 0
    num_blocks_free: int  # includes cached ones (evicted on demand)
    num_blocks_cached: int  # free but holding a reusable prefix
    num_active_tokens: int  # tokens whose K/V running sequences hold
    kv_bytes_in_use: int  # used blocks x bytes_per_block
    kv_cache_bytes: int  # the whole pool
    num_scheduled_tokens: int
    num_prefill_tokens: int  # tokens of prefill chunks
    num_decode_tokens: int
    num_generated_tokens: int
    num_prefix_hit_tokens: int
    num_preemptions: int
    num_swapped_out: int  # sequences swapped to the CPU pool this step
    num_swapped_in: int
    total_preemptions: int
    total_prefix_hit_tokens: int
    total_evicted_blocks: int = 0  # cached blocks a new allocation has taken the hash from
    total_cpu_hit_tokens: int = 0  # prompt tokens the CPU tier (kv_offloading_bytes) served
    total_computed_prompt_tokens: int = 0  # prompt tokens neither cache served, computed (again after a recompute)

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of blocks in use (vLLM's `kv_cache_usage_perc`)."""
        return self.num_blocks_used / self.num_blocks_total if self.num_blocks_total else 0.0
