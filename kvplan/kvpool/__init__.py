"""vLLM's KV block pool, without tensors: what `kvplan predict` and the bundled engine both run.

Modules: block_pool.py (`BlockPool`: ref counts, one LRU free queue, hashed full blocks and their
eviction, as vLLM V1's `v1/core/block_pool.py`), block_hash.py (chained hashes of full blocks,
kept per token stream so a conversation's turns hash each block once), cpu_tier.py (`CpuTier`:
vLLM's native CPU offloading store, LRU).

Below the engine and perf (both allocate from it); imports nothing of kvplan.
"""
