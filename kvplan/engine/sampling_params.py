"""`SamplingParams`: how one request is decoded (vLLM's names and defaults)."""
from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import KvplanError


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
        if self.temperature < 0:
            raise KvplanError(f"SamplingParams.temperature must be >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise KvplanError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
