"""The engine settings the simulated scheduler runs with (vLLM's pool, budgets and modes)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    num_gpu_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool = True  # V1 always; V0 only above 32K max_model_len
    # vLLM >= 0.14 (async scheduling by default): step N+1 is scheduled when step N starts, so a
    # request reaching a busy engine during step N waits for N+1 too and first runs in N+2
    async_scheduling: bool = False
    # V1's prefix caching (on by default): a preempted request's full blocks stay hashed in the
    # free queue until evicted, and its recompute starts from those it still finds
    prefix_caching: bool = True
    # vLLM's native CPU offloading (--kv-offloading-size): blocks the CPU tier holds (0: none) and
    # how long one block takes to copy back over the host link
    cpu_tier_blocks: int = 0
    load_s_per_block: float = 0.0
