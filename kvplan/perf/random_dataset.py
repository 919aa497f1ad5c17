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
        for flag, value in (("--random-input-len", self.random_input_len), ("--random-output-len", self.random_output_len),
                            ("--num-prompts", self.num_prompts)):
            if value <= 0:
                raise KvplanError(f"{flag} must be positive, got {value}")
        if not 0 <= self.random_range_ratio < 1:
            raise KvplanError(f"--random-range-ratio must be in [0, 1), got {self.random_range_ratio}")
        if not self.request_rate > 0:
            raise KvplanError(f"--request-rate must be positive (or inf), got {self.request_rate}")
        if not self.burstiness > 0:
            raise KvplanError(f"--burstiness must be positive, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency <= 0:
            raise KvplanError(f"--max-concurrency must be positive, got {self.max_concurrency}")

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
        cached = min(int(r.prompt_tokens * hit_rate) // block_size * block_size, (r.prompt_tokens - 1) // block_size * block_size)
        out.append(Request(r.arrival_s, r.prompt_tokens, r.output_tokens, max(0, cached)))
    return out
