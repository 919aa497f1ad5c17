"""Which prompt tokens vLLM's prefix cache already holds when a request arrives: whole blocks
only, never the last prompt token (vLLM always computes at least one)."""
from __future__ import annotations

from dataclasses import replace

from kvplan.workload.request import Request


def prefix_cache_hits(prompts: list[tuple[int, ...]], block_size: int) -> list[int]:
    """Tokens of each prompt vLLM's prefix cache would serve, in sending order: a full block hits
    when an earlier prompt had the same block after the same blocks (vLLM hashes each full block
    with its parent's hash), and the last prompt token is always computed. The cache is taken as
    large enough to keep every block it saw (no eviction): an upper bound when the pool is tight."""
    seen: set[int] = set()
    out = []
    for ids in prompts:
        parent, hits, counting = 0, 0, True
        usable = (len(ids) - 1) // block_size  # full blocks before the last token
        for b in range(len(ids) // block_size):
            parent = hash((parent, ids[b * block_size:(b + 1) * block_size]))
            if counting and b < usable and parent in seen:
                hits += 1
            else:
                counting = False
            seen.add(parent)
        out.append(hits * block_size)
    return out


def with_cached_tokens(requests: list[Request], block_size: int) -> list[Request]:
    """The requests, each with the prompt tokens earlier ones left in the cache (`prefix_cache_hits`
    over their token ids in arrival order; a closed loop's in stream order)."""
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s or 0.0, i))
    hits = [0] * len(requests)
    for i, h in zip(order, prefix_cache_hits([requests[i].token_ids for i in order], block_size)):
        hits[i] = h
    return [replace(r, cached_tokens=h) for r, h in zip(requests, hits)]


def with_hit_rate(requests: list[Request], hit_rate: float, block_size: int) -> list[Request]:
    """The same requests with `hit_rate` of each prompt already in the prefix cache (whole blocks,
    never the last prompt token)."""
    out = []
    for r in requests:
        cached = min(
            int(r.prompt_tokens * hit_rate) // block_size * block_size, (r.prompt_tokens - 1) // block_size * block_size
        )
        out.append(replace(r, cached_tokens=max(0, cached)))
    return out
