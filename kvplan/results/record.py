"""`RequestRecord`: what the runner saw of one request, the raw material of every metric.

All times are seconds on one clock, the run's (0 = run start): `arrival_s` is when the request
was submitted (closed-loop requests too), `token_times_s` holds one entry per output token, when
it reached the client (the first is `first_token_s`), `finish_s` when the request ended.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

Status = Literal["ok", "error", "aborted"]
STATUSES: tuple[str, ...] = ("ok", "error", "aborted")


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    class_name: str
    arrival_s: float
    first_token_s: float | None
    token_times_s: tuple[float, ...]
    finish_s: float | None
    prompt_tokens: int
    output_tokens: int
    status: Status = "ok"
    error: str | None = None
    is_warmup: bool = False
    num_preemptions: int = field(default=0)  # times the engine preempted this request (0 when unknown)
    # HTTP targets: the server's own counts from `usage` (None: it reported none)
    server_input_tokens: int | None = None
    server_output_tokens: int | None = None
    # seconds it waited on the client before being sent: for a --max-concurrency slot, or (closed
    # loop, all requests due at the start as vLLM's rate inf) for a user to take it; vLLM's client_queue_time
    queue_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"RequestRecord.status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        object.__setattr__(self, "token_times_s", tuple(float(t) for t in self.token_times_s))

    # --- per-request figures (seconds; None where undefined) -------------------------------------
    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s

    @property
    def last_token_s(self) -> float | None:
        return self.token_times_s[-1] if self.token_times_s else self.finish_s

    @property
    def tpot_s(self) -> float | None:
        """(last token - first token) / (output_tokens - 1): decode time per token, first excluded.

        Undefined for one-token outputs (vLLM leaves them out of TPOT too)."""
        if self.output_tokens <= 1 or self.first_token_s is None or self.last_token_s is None:
            return None
        return (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> np.ndarray:
        """Gaps between consecutive output tokens (empty without per-token times)."""
        return np.diff(np.asarray(self.token_times_s, dtype=float))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["token_times_s"] = list(self.token_times_s)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)
