"""vLLM's random dataset, as `vllm bench serve --dataset-name random` draws it: lengths uniform in
[len x (1 - r), len x (1 + r)], gamma inter-arrival gaps with mean 1/rate and shape `burstiness`,
the first request's included, rescaled so the last is sent at exactly num_prompts / rate (rate
inf sends all at once). Lengths only: the prompts' tokens are random, so no prefix is shared."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvplan.errors import KvplanError
from kvplan.workload.limits import MAX_REQUESTS, MAX_TOKENS
from kvplan.workload.request import Request

MIN_REQUEST_RATE_PER_S = 1e-6  # one request a million seconds apart: slower makes every gap infinite
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
class RandomDataset:
    """`vllm bench serve --dataset-name random` flags, named as there."""

    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    num_prompts: int = 1000
    request_rate: float = math.inf  # requests/s; inf sends all at once
    burstiness: float = 1.0  # gamma shape of inter-arrival times (1: Poisson)
    max_concurrency: int | None = None
    seed: int = 0
    # whose client sends them: vLLM's rescales its gaps so the last request goes at num_prompts /
    # rate; SGLang's bench_serving sends the first at once and sleeps each drawn gap after it
    client: str = "vllm"

    def validate(self) -> None:
        """Each flag in a range a simulation can finish in: lengths and counts bounded, a rate no
        slower than one request a million seconds apart, burstiness a finite shape."""
        for flag, value, most in (("--random-input-len", self.random_input_len, MAX_TOKENS),
                                  ("--random-output-len", self.random_output_len, MAX_TOKENS),
                                  ("--num-prompts", self.num_prompts, MAX_REQUESTS)):
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
        if self.max_concurrency is not None and not 0 < self.max_concurrency <= MAX_REQUESTS:
            raise KvplanError(f"--max-concurrency must be in 1..{MAX_REQUESTS:,}, got {self.max_concurrency}")
        if not 0 <= self.seed < 2**32:
            raise KvplanError(f"--seed must be in 0..{2**32 - 1:,}, got {self.seed}")

    @property
    def longest_tokens(self) -> int:
        """The longest prompt + output a draw can give."""
        r = self.random_range_ratio
        return math.ceil(self.random_input_len * (1 + r)) + math.ceil(self.random_output_len * (1 + r))

    def requests(self) -> list[Request]:
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
        elif self.client == "sglang":  # sglang bench_serving: send, then sleep a drawn gap
            gaps = rng.gamma(self.burstiness, 1.0 / (self.request_rate * self.burstiness), size=n)
            arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
        else:  # vllm bench serve's get_request (serve.py, 0.19.1): every request waits its own gap, the
            # first too, and the sends are rescaled so the last goes out at exactly n / rate
            delays = np.cumsum(rng.gamma(self.burstiness, 1.0 / (self.request_rate * self.burstiness), size=n))
            arrivals = delays * (n / self.request_rate / delays[-1]) if delays[-1] > 0 else delays
        return [Request(float(a), int(i), int(o), index=k) for k, (a, i, o) in enumerate(zip(arrivals, ins, outs))]
