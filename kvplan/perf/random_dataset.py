"""The requests `vllm bench serve` sends: random-dataset lengths and Poisson/gamma arrivals."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvplan.errors import KvplanError


@dataclass(frozen=True)
class Request:
    arrival_s: float  # when the client would send it (0 for rate inf); max_concurrency may delay it
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0  # prompt tokens found in the prefix cache (block-aligned)


MAX_PROMPTS = 1_000_000  # as many requests as `kvplan stress` holds in one run
MAX_TOKENS = 2**24  # per prompt or output
MIN_REQUEST_RATE_PER_S = 1e-6
MIN_BURSTINESS, MAX_BURSTINESS = 1e-3, 1e3


def check_range_ratio(ratio: float) -> None:
    if not 0 <= ratio < 1:
        raise KvplanError(f"--random-range-ratio must be in [0, 1), got {ratio}")


def parse_request_rate(text: str) -> float:
    """--request-rate as typed: a number of requests/s or inf (its range: the command's own check)."""
    try:
        return float(text)
    except ValueError:
        raise KvplanError(f"--request-rate takes a number of requests/s or inf, got {text!r}") from None


@dataclass(frozen=True)
class Workload:
    """`vllm bench serve --dataset-name random` flags, named as there."""

    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    num_prompts: int = 1000
    request_rate: float = math.inf  # requests/s; inf sends all at once
    burstiness: float = 1.0  # gamma shape of inter-arrival times (1: Poisson)
    max_concurrency: int | None = None
    seed: int = 0

    def validate(self) -> None:
        """Each flag in a range a simulation can finish in: lengths and counts bounded (1M prompts
        of 16M tokens), a rate no slower than one request a million seconds apart (a denormal rate
        would make every gap infinite), burstiness a finite shape."""
        for flag, value, most in (("--random-input-len", self.random_input_len, MAX_TOKENS),
                                  ("--random-output-len", self.random_output_len, MAX_TOKENS),
                                  ("--num-prompts", self.num_prompts, MAX_PROMPTS)):
            if not 0 < value <= most:
                raise KvplanError(f"{flag} must be in 1..{most:,}, got {value}")
        check_range_ratio(self.random_range_ratio)
        if not (self.request_rate >= MIN_REQUEST_RATE_PER_S):  # NaN fails too
            raise KvplanError(f"--request-rate must be at least {MIN_REQUEST_RATE_PER_S:g} requests/s (or inf), "
                              f"got {self.request_rate}")
        if not MIN_BURSTINESS <= self.burstiness <= MAX_BURSTINESS:
            raise KvplanError(
                f"--burstiness must be in [{MIN_BURSTINESS:g}, {MAX_BURSTINESS:g}], got {self.burstiness}"
            )
        if self.max_concurrency is not None and not 0 < self.max_concurrency <= MAX_PROMPTS:
            raise KvplanError(f"--max-concurrency must be in 1..{MAX_PROMPTS:,}, got {self.max_concurrency}")
        if not 0 <= self.seed < 2**32:
            raise KvplanError(f"--seed must be in 0..{2**32 - 1:,}, got {self.seed}")

    def requests(self) -> list[Request]:
        """Lengths uniform in [len x (1 - r), len x (1 + r)] as vLLM's random dataset; gamma
        inter-arrival gaps with mean 1/rate and shape `burstiness`, as `vllm bench serve`."""
        self.validate()
        rng = np.random.default_rng(self.seed)
        n = self.num_prompts

        def lengths(mean: int) -> np.ndarray:
            lo = max(1, math.floor(mean * (1 - self.random_range_ratio)))
            hi = max(lo, math.ceil(mean * (1 + self.random_range_ratio)))
            return rng.integers(lo, hi + 1, size=n) if hi > lo else np.full(n, lo)

        ins, outs = lengths(self.random_input_len), lengths(self.random_output_len)
        if math.isinf(self.request_rate):
            arrivals = np.zeros(n)
        else:
            gaps = rng.gamma(self.burstiness, 1.0 / (self.request_rate * self.burstiness), size=n)
            arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
        return [Request(float(a), int(i), int(o)) for a, i, o in zip(arrivals, ins, outs)]


def with_prefix_hits(requests: list[Request], hit_rate: float, block_size: int) -> list[Request]:
    """The same requests with `hit_rate` of each prompt already in the prefix cache (whole blocks,
    never the last prompt token: vLLM always computes at least one)."""
    out = []
    for r in requests:
        cached = min(
            int(r.prompt_tokens * hit_rate) // block_size * block_size, (r.prompt_tokens - 1) // block_size * block_size
        )
        out.append(Request(r.arrival_s, r.prompt_tokens, r.output_tokens, max(0, cached)))
    return out


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
