"""`SamplingParams`: how one request is decoded (vLLM's names and defaults)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan.errors import KvplanError

SAMPLING_EPS = 1e-5  # vLLM's floor: a temperature below it is greedy (dividing logits by 1e-40 gives inf/nan)
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class SamplingParams:
    """`temperature=0` is greedy. `seed` gives the request its own generator (else the engine's)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise KvplanError(f"SamplingParams.max_tokens must be a positive integer, got {self.max_tokens!r}")
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise KvplanError(f"SamplingParams.{name} must be a finite number, got {value!r}")
        if self.temperature < 0:
            raise KvplanError(f"SamplingParams.temperature must be >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise KvplanError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed <= MAX_SEED):
            raise KvplanError(f"SamplingParams.seed must be an integer in 0..{MAX_SEED}, got {self.seed!r}")
        if any(isinstance(t, bool) or not isinstance(t, int) for t in self.stop_token_ids):
            raise KvplanError(f"SamplingParams.stop_token_ids must be integers, got {self.stop_token_ids!r}")
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        """Greedy below vLLM's floor: a tiny temperature would turn the logits into inf/nan."""
        return self.temperature < SAMPLING_EPS
