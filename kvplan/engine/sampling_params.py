"""`SamplingParams`: how one request is decoded (vLLM's names, defaults and ranges)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan.errors import KvplanError

SAMPLING_EPS = 1e-5  # vLLM: a temperature below it is greedy
MIN_TEMPERATURE = (
    1e-2  # vLLM (sampling_params.py _MAX_TEMP) raises any 0 < t < 0.01 to 0.01: logits / 1e-40 are inf/nan
)
MAX_TEMPERATURE = 2.0  # vLLM refuses more (temperature must be in [0, 2])
MAX_SEED = 2**63 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingParams:
    """`temperature=0` is greedy; 0 < t < 0.01 samples at 0.01, as vLLM. `seed` gives the request its own
    generator (else the engine's). `top_k=0` (or -1, which vLLM quietly accepts) and `min_p=0` turn
    those filters off."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    top_k: int = 0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        if not _is_int(self.max_tokens) or self.max_tokens <= 0:
            raise KvplanError(f"SamplingParams.max_tokens must be a positive integer, got {self.max_tokens!r}")
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value):
                raise KvplanError(f"SamplingParams.{name} must be a finite number, got {value!r}")
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            raise KvplanError(
                f"SamplingParams.temperature must be in [0, {MAX_TEMPERATURE:g}], got {self.temperature!r}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise KvplanError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if not _is_int(self.top_k) or self.top_k < -1:
            raise KvplanError(
                f"SamplingParams.top_k must be 0 (disable), -1 (disable) or at least 1, got {self.top_k!r}"
            )
        if not 0.0 <= self.min_p <= 1.0:
            raise KvplanError(f"SamplingParams.min_p must be in [0, 1], got {self.min_p!r}")
        if not isinstance(self.ignore_eos, bool):
            raise KvplanError(f"SamplingParams.ignore_eos must be true or false, got {self.ignore_eos!r}")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED):
            raise KvplanError(f"SamplingParams.seed must be an integer in 0..{MAX_SEED}, got {self.seed!r}")
        if any(not _is_int(t) for t in self.stop_token_ids):
            raise KvplanError(f"SamplingParams.stop_token_ids must be integers, got {self.stop_token_ids!r}")
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if self.top_k == -1:
            object.__setattr__(self, "top_k", 0)
        if 0 < self.temperature < MIN_TEMPERATURE:
            object.__setattr__(self, "temperature", MIN_TEMPERATURE)
        if self.greedy:  # as vLLM: the filters mean nothing to an argmax
            object.__setattr__(self, "top_p", 1.0)
            object.__setattr__(self, "top_k", 0)
            object.__setattr__(self, "min_p", 0.0)

    @property
    def greedy(self) -> bool:
        """Greedy at temperature 0 (vLLM: below 1e-5, which only 0 reaches after the 0.01 floor)."""
        return self.temperature < SAMPLING_EPS
