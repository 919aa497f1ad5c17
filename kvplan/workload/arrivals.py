"""When requests are sent: a tagged union on `type`.

- `poisson`: open loop, gaps drawn from Gamma(shape=burstiness, scale=1/(rate*burstiness)), as
  vLLM's benchmark_serving does (burstiness 1 = exponential gaps; < 1 burstier).
- `constant`: open loop, gaps of exactly 1/rate.
- `ramp`: open loop whose rate moves from `start_rate_per_s` to `end_rate_per_s` over the run's
  requests, linearly or exponentially in the request's index, as `vllm bench serve
  --ramp-up-strategy` (serve.py get_request, 0.19.1): request i's gap is drawn at rate
  start + (end - start) x i / (n - 1) (linear) or start x (end / start)^(i / (n - 1)), and the
  first request waits its own gap, as vLLM's does.
- `concurrency`: closed loop, no arrival times: a request is sent whenever fewer than
  `limit(elapsed)` are open.

The first request arrives at 0. With `ramp_s` the rate (or the concurrency) grows linearly from 0
over `ramp_s` seconds: gaps are drawn at full rate and mapped through the inverse of the ramp's
cumulative intensity. An open loop's `max_concurrency` caps requests in flight: a due request
waits for a slot, and its TTFT counts from when it is sent (vllm bench serve --max-concurrency
with a --request-rate).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from numpy.random import Generator
from pydantic import BeforeValidator, Field, ValidationError

from kvplan.errors import KvplanError
from kvplan.validation import FieldIssue, StrictModel, first_error, short_repr
from kvplan.workload.limits import MAX_DURATION_S, MAX_RATE_PER_S, MAX_REQUESTS, MIN_RATE_PER_S

_RATE = Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
_CAP = Field(default=None, gt=0, le=MAX_REQUESTS)
_RAMP = Field(default=0.0, ge=0, le=MAX_DURATION_S)


def _ramp_time(full_rate_s: float, ramp_s: float) -> float:
    """Wall time at which a linearly ramped rate has delivered `full_rate_s` seconds of full-rate load."""
    if ramp_s <= 0:
        return full_rate_s
    if full_rate_s <= ramp_s / 2:
        return math.sqrt(2 * ramp_s * full_rate_s)
    return full_rate_s + ramp_s / 2


class _OpenLoop:
    """Arrival times of an open loop (its members own the fields: a file lists them in this order)."""

    closed_loop: ClassVar[bool] = False
    if TYPE_CHECKING:  # the members' fields (declared there, so pydantic keeps their order)
        max_concurrency: int | None
        ramp_s: float

    @property
    def in_flight_cap(self) -> int | None:
        """Requests in flight at most (None: no cap)."""
        return self.max_concurrency

    def _gap(self, rng: Generator) -> float:
        raise NotImplementedError

    def times(self, rng: Generator, num_requests: int | None = None) -> Iterator[float]:
        """Arrival times (s), forever; the first is 0."""
        cumulative = 0.0
        while True:
            yield _ramp_time(cumulative, self.ramp_s)
            cumulative += self._gap(rng)


class PoissonArrival(_OpenLoop, StrictModel):
    type: Literal["poisson"] = "poisson"
    rate_per_s: float = _RATE
    burstiness: float | None = Field(default=None, ge=1e-3, le=1e3)  # None: 1 (Poisson)
    max_concurrency: int | None = _CAP
    ramp_s: float = _RAMP

    @property
    def gamma_shape(self) -> float:
        """Gamma shape of the inter-arrival gaps (1.0 unless `burstiness` is given)."""
        return self.burstiness if self.burstiness is not None else 1.0

    def _gap(self, rng: Generator) -> float:
        shape = self.gamma_shape
        return float(rng.gamma(shape, 1.0 / (self.rate_per_s * shape)))


class ConstantArrival(_OpenLoop, StrictModel):
    type: Literal["constant"] = "constant"
    rate_per_s: float = _RATE
    max_concurrency: int | None = _CAP
    ramp_s: float = _RAMP

    def _gap(self, rng: Generator) -> float:
        return 1.0 / self.rate_per_s


class RampArrival(StrictModel):
    closed_loop: ClassVar[bool] = False
    type: Literal["ramp"] = "ramp"
    strategy: Literal["linear", "exponential"] = "linear"
    start_rate_per_s: float = _RATE
    end_rate_per_s: float = _RATE
    burstiness: float | None = Field(default=None, ge=1e-3, le=1e3)  # None: 1 (Poisson gaps)
    max_concurrency: int | None = _CAP

    @property
    def in_flight_cap(self) -> int | None:
        return self.max_concurrency

    def rate_at(self, index: int, num_requests: int) -> float:
        """Request `index`'s rate (vLLM's _get_current_request_rate)."""
        progress = index / max(num_requests - 1, 1)
        if self.strategy == "linear":
            return self.start_rate_per_s + (self.end_rate_per_s - self.start_rate_per_s) * progress
        return self.start_rate_per_s * (self.end_rate_per_s / self.start_rate_per_s) ** progress

    def times(self, rng: Generator, num_requests: int | None = None) -> Iterator[float]:
        if num_requests is None:
            raise KvplanError("a ramp arrival spans the run's requests: give num_requests, not duration_s")
        shape = self.burstiness if self.burstiness is not None else 1.0
        t_s = 0.0
        for i in range(num_requests):
            t_s += float(rng.gamma(shape, 1.0 / (self.rate_at(i, num_requests) * shape)))
            yield t_s


class ClosedLoop(StrictModel):
    closed_loop: ClassVar[bool] = True
    type: Literal["concurrency"] = "concurrency"
    concurrency: int = Field(gt=0, le=MAX_REQUESTS)
    ramp_s: float = _RAMP

    @property
    def in_flight_cap(self) -> int:
        return self.concurrency

    def limit(self, elapsed_s: float) -> int:
        """Requests allowed open at `elapsed_s` (ramps linearly from 1 over ramp_s)."""
        if self.ramp_s <= 0 or elapsed_s >= self.ramp_s:
            return self.concurrency
        return max(1, math.ceil(self.concurrency * max(elapsed_s, 0.0) / self.ramp_s))


ARRIVALS: dict[str, type[StrictModel]] = {"poisson": PoissonArrival, "constant": ConstantArrival,
                                          "ramp": RampArrival, "concurrency": ClosedLoop}
_KINDS = (PoissonArrival, ConstantArrival, RampArrival, ClosedLoop)


def _one_arrival(v: Any) -> Any:
    """The member `type` names, each key checked against it (a key of another type is named as
    such, not as unknown), errors located at the key as written: `arrival.rate_per_s`."""
    if isinstance(v, _KINDS):
        return v
    choices = ", ".join(repr(k) for k in ARRIVALS)
    if not isinstance(v, dict):
        raise FieldIssue((), f"must be a mapping with a type ({choices}), got {short_repr(v)}")
    kind = v.get("type")
    if kind is None:
        raise FieldIssue(("type",), f"is required ({choices})")
    cls = ARRIVALS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise FieldIssue(("type",), f"{short_repr(kind)} is not a valid choice; choices: {choices}")
    for key, value in v.items():
        owners = [k for k, c in ARRIVALS.items() if key in c.model_fields]
        if key not in cls.model_fields and owners:
            loop = "closed-loop " if cls.closed_loop else ""  # type: ignore[attr-defined]
            raise FieldIssue((key,), f"has no effect for {loop}arrival type {kind} (got {short_repr(value)}); "
                             f"it applies to {' and '.join(owners)}")
    try:
        return cls.model_validate(v)
    except ValidationError as exc:
        raise FieldIssue(*first_error(exc, cls)) from None


Arrival = Annotated[PoissonArrival | ConstantArrival | RampArrival | ClosedLoop, BeforeValidator(_one_arrival)]
OpenLoop = PoissonArrival | ConstantArrival | RampArrival
