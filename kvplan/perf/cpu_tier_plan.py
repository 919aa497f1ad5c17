"""How big a CPU tier `--kv-offloading-size` gives, in blocks, and how long a block takes to come
back, as vLLM sizes it (config/vllm.py and v1/kv_offload/cpu/spec.py, 0.19.1):

    native    cpu_bytes_to_use = size x 2^30, the total over every rank; a block there is one GPU
              block of every layer on every rank (page x kv-cache tensors x world size), so
              num_blocks = cpu_bytes_to_use // (block bytes per GPU x TP x PP)
    load      each rank copies its share of a block over its own host link at the same time:
              block bytes per GPU / (the catalog's host link, per direction x HOST_LINK_EFFICIENCY)

`lmcache` keeps its own store and policies (not modelled: refused, never replaced by native's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan.errors import KvplanError
from kvplan.plan.budget import CapacityPlan
from kvplan.plan.engine_args import EngineArgs

GIB = 2**30
MAX_TIER_GIB = 2**20  # a TiB-scale host holds ~2^10 GiB; anything past 2^20 GiB is a typo
# Pinned host<->device copies reach about 80% of a link's nominal rate (PCIe Gen4 x16: ~25 of 31.5
# GB/s; Gen5: ~50 of 63, the figures NVIDIA's bandwidthTest prints). A datasheet prior, not fitted:
# no published vLLM offloading run in kvplan's data times a load.
HOST_LINK_EFFICIENCY = 0.8
BACKENDS = ("native", "lmcache")
# An 8-GPU H100/H200/B200 server (DGX) ships 2 TiB of host memory: 256 GiB a GPU. Without
# --host-memory-gib a larger tier is planned, with a note that the host may not hold it.
HOST_GIB_PER_GPU = 256


@dataclass(frozen=True)
class CpuTierPlan:
    size_gib: float
    num_blocks: int
    block_bytes_all_ranks: int
    load_s_per_block: float
    host_link: str
    hybrid_note: str | None  # notes: a hybrid pool planned with the hybrid manager on (vLLM turns it
    # off with a connector); a tier larger than the usual host holds, the host unknown

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kv_offloading_size_gib": self.size_gib, "cpu_tier_blocks": self.num_blocks,
            "cpu_load_ms_per_block": self.load_s_per_block * 1e3, "host_link": self.host_link,
        }
        if self.hybrid_note:
            out["kv_offloading_note"] = self.hybrid_note
        return out


def cpu_tier_plan(plan: CapacityPlan, args: EngineArgs, size_gib: float, backend: str,
                  prefix_caching: bool, host_memory_gib: float | None = None) -> CpuTierPlan:
    """The tier vLLM builds for `--kv-offloading-size size_gib`; bad settings are one line. With
    `host_memory_gib` (the server's RAM, all its GPUs' tiers share it) a tier that does not fit is
    refused: vLLM pins the whole tier at start-up."""
    if backend not in BACKENDS:
        raise KvplanError(f"--kv-offloading-backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if backend == "lmcache":
        raise KvplanError("--kv-offloading-backend lmcache: LMCache's store and eviction are not modelled; "
                          "kvplan models vLLM's native CPU offloading (--kv-offloading-backend native)")
    if not 0 < size_gib <= MAX_TIER_GIB:
        raise KvplanError(f"--kv-offloading-size {size_gib:g}: give the CPU tier in GiB, in (0, {MAX_TIER_GIB}]")
    if host_memory_gib is not None and size_gib > host_memory_gib:
        raise KvplanError(f"--kv-offloading-size {size_gib:g} GiB is more than the host's --host-memory-gib "
                          f"{host_memory_gib:g}: vLLM pins the whole tier in host memory at start-up")
    if not prefix_caching:
        raise KvplanError("--kv-offloading-size needs prefix caching (the tier is looked up by block hashes)")
    gpu = args.gpu
    if gpu is None or gpu.host_link_gbps is None:
        name = gpu.name if gpu is not None else "this GPU"
        raise KvplanError(f"--kv-offloading-size: {name} has no host link in kvplan's GPU catalog "
                          "(unified memory, or not recorded), so a CPU tier's copies cannot be timed")
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    per_gpu = plan.block_bytes
    num_blocks = int(size_gib * GIB) // (per_gpu * world)
    notes = []
    if len(plan.groups) > 1:
        notes.append("vLLM turns the hybrid KV cache manager off when a KV connector is set (0.13 to 0.19, unless "
                     "--no-disable-hybrid-kv-cache-manager); kvplan plans this model's GPU pool with it on, so "
                     "the pool is approximate")
    if host_memory_gib is None and size_gib > HOST_GIB_PER_GPU * world:
        notes.append(f"a {size_gib:g} GiB tier is more than the {HOST_GIB_PER_GPU * world:g} GiB of host memory "
                     f"{world} GPU(s) of an 8-GPU server have (2 TiB for 8); vLLM pins the whole tier at start-up: "
                     "pass --host-memory-gib to check it fits")
    note = "; ".join(notes) or None
    return CpuTierPlan(size_gib, num_blocks, per_gpu * world,
                       per_gpu / (gpu.host_link_gbps * 1e9 * HOST_LINK_EFFICIENCY), gpu.host_link, note)
