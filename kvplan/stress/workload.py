"""The seeded request stream of a scenario: classes, lengths, prompt token ids, arrival times.

Determinism: the same scenario and seed give the same stream on every run and machine. The seed
feeds a `SeedSequence` whose children drive four independent `Generator(PCG64)` streams (class
choice, lengths, token ids, arrival gaps), so changing the arrival process leaves the requests'
contents unchanged: a paged and a contiguous run, or a Poisson and a constant run, see the same
prompts. A shared prefix's token ids come from the seed and the prefix id alone, so every class
naming that id starts with the same tokens.

Arrivals (open loop): Poisson with gamma burstiness draws gaps from Gamma(shape=burstiness,
scale=1/(rate*burstiness)), as vLLM's benchmark_serving does (burstiness 1 = exponential gaps);
constant spaces them 1/rate apart. The first request arrives at 0. With `ramp_s` the rate grows
linearly from 0 to `rate_per_s` over `ramp_s` seconds (gaps are drawn at full rate and mapped
through the inverse of the ramp's cumulative intensity). Closed loop (`concurrency`) has no
arrival times: the runner submits a request whenever fewer than `concurrency_limit(...)` are open.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

import numpy as np
from numpy.random import PCG64, Generator, SeedSequence

from kvplan.errors import KvplanError
from kvplan.stress.dataset import DatasetStream
from kvplan.stress.scenario import SPECIAL_TOKEN_IDS, Arrival, LengthSpec, RequestClass, Scenario

_PREFIX_SALT = 0x50524546  # "PREF": keeps prefix streams apart from the request streams


@dataclass(frozen=True)
class RequestSpec:
    """One request to submit: `arrival_s` is seconds after the run start (None: closed loop)."""

    index: int
    request_id: str
    class_name: str
    arrival_s: float | None
    prompt_token_ids: tuple[int, ...]
    output_tokens: int  # exact: submit with max_tokens=output_tokens and ignore_eos
    shared_prefix_id: str | None
    shared_prefix_tokens: int
    is_warmup: bool
    prompt_text: str | None = None  # a dataset's own prompt (sent as text to a server); None: the ids


    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


def _rng(seed_seq: SeedSequence) -> Generator:
    return Generator(PCG64(seed_seq))


def prefix_token_ids(seed: int, prefix_id: str, tokens: int, vocab_size: int) -> tuple[int, ...]:
    """The token ids of shared prefix `prefix_id` (depends on the seed and the id only)."""
    rng = _rng(SeedSequence([seed, _PREFIX_SALT, *prefix_id.encode("utf-8")]))
    return tuple(int(t) for t in rng.integers(SPECIAL_TOKEN_IDS, vocab_size, size=tokens))


def sample_length(spec: LengthSpec, rng: Generator, lower: int = 1, upper: int | None = None) -> int:
    """One draw, rounded and clipped to [min, max] and to [lower, upper]."""
    if spec.dist == "fixed":
        value = float(spec.mean)
    elif spec.dist == "uniform":
        value = float(rng.integers(spec.min, spec.max + 1))
    elif spec.dist == "normal":
        value = float(rng.normal(spec.mean, spec.std))
    else:  # lognormal with the given mean and std of the length itself
        sigma2 = math.log1p((spec.std / spec.mean) ** 2)
        value = float(rng.lognormal(math.log(spec.mean) - sigma2 / 2, math.sqrt(sigma2)))
    lo = max(spec.min or 1, lower)
    hi = min(spec.max if spec.max is not None else math.inf, upper if upper is not None else math.inf)
    return int(min(max(round(value), lo), hi))


def _ramp_time(full_rate_s: float, ramp_s: float) -> float:
    """Wall time at which a linearly ramped rate has delivered `full_rate_s` seconds of full-rate load."""
    if ramp_s <= 0:
        return full_rate_s
    if full_rate_s <= ramp_s / 2:
        return math.sqrt(2 * ramp_s * full_rate_s)
    return full_rate_s + ramp_s / 2


def arrival_times(arrival: Arrival, rng: Generator) -> Iterator[float]:
    """Open-loop arrival times (s), forever; the first is 0."""
    if arrival.type == "concurrency":
        raise KvplanError("closed-loop (concurrency) arrivals have no arrival times")
    rate = float(arrival.rate_per_s)
    shape = arrival.gamma_shape
    cumulative = 0.0
    while True:
        yield _ramp_time(cumulative, arrival.ramp_s)
        gap = rng.gamma(shape, 1.0 / (rate * shape)) if arrival.type == "poisson" else 1.0 / rate
        cumulative += float(gap)


def concurrency_limit(arrival: Arrival, elapsed_s: float) -> int:
    """Closed loop: requests allowed open at `elapsed_s` (ramps linearly from 1 over ramp_s)."""
    target = int(arrival.concurrency or 1)
    if arrival.ramp_s <= 0 or elapsed_s >= arrival.ramp_s:
        return target
    return max(1, math.ceil(target * max(elapsed_s, 0.0) / arrival.ramp_s))


def _lengths(c: RequestClass, rng: Generator, max_model_len: int) -> tuple[int, int]:
    """(prompt, output) tokens: output first, then the prompt clipped to max_model_len - output."""
    prefix = c.shared_prefix.tokens if c.shared_prefix else 0
    prompt_floor = max(c.prompt_tokens.lower_tokens, prefix + 1)
    output = sample_length(c.output_tokens, rng, 1, max_model_len - prompt_floor)
    prompt = sample_length(c.prompt_tokens, rng, prefix + 1, max_model_len - output)
    return prompt, output


def iter_requests(
    scenario: Scenario, vocab_size: int | None = None, stream: DatasetStream | None = None
) -> Iterator[RequestSpec]:
    """The scenario's request stream: `num_requests` of them, or (open loop) those arriving
    before `duration_s`; a closed-loop `duration_s` scenario streams forever (the runner stops).
    A dataset scenario replays its file (`stream`, when already read, else read here)."""
    vocab = int(vocab_size if vocab_size is not None else scenario.model_spec().vocab_size)
    if vocab <= SPECIAL_TOKEN_IDS:
        raise KvplanError(f"vocab_size {vocab} leaves no ordinary token ids (0..{SPECIAL_TOKEN_IDS - 1} are special)")
    if scenario.workload.dataset is not None:
        yield from _dataset_requests(scenario, stream or dataset_stream(scenario, vocab))
        return
    class_ss, length_ss, token_ss, arrival_ss = SeedSequence(scenario.seed).spawn(4)
    class_rng, length_rng, token_rng, arrival_rng = map(_rng, (class_ss, length_ss, token_ss, arrival_ss))
    classes = scenario.workload.classes
    weights = np.array([c.weight for c in classes], dtype=float)
    weights /= weights.sum()
    prefixes = {c.shared_prefix.id: prefix_token_ids(scenario.seed, c.shared_prefix.id, c.shared_prefix.tokens, vocab)
                for c in classes if c.shared_prefix}
    open_loop = scenario.arrival.type != "concurrency"
    arrivals = arrival_times(scenario.arrival, arrival_rng) if open_loop else None
    max_len = scenario.max_model_len
    limit = scenario.num_requests
    for i in count():
        if limit is not None and i >= limit:
            return
        arrival_s = next(arrivals) if arrivals is not None else None
        if limit is None and arrival_s is not None and arrival_s >= float(scenario.duration_s):
            return
        c = classes[int(class_rng.choice(len(classes), p=weights))]
        prompt, output = _lengths(c, length_rng, max_len)
        prefix = prefixes[c.shared_prefix.id] if c.shared_prefix else ()
        unique = token_rng.integers(SPECIAL_TOKEN_IDS, vocab, size=prompt - len(prefix))
        yield RequestSpec(
            index=i, request_id=f"req-{i:06d}", class_name=c.name, arrival_s=arrival_s,
            prompt_token_ids=tuple(prefix) + tuple(int(t) for t in unique), output_tokens=output,
            shared_prefix_id=c.shared_prefix.id if c.shared_prefix else None, shared_prefix_tokens=len(prefix),
            is_warmup=i < scenario.warmup_requests,
        )


def dataset_stream(scenario: Scenario, vocab_size: int | None = None) -> DatasetStream:
    """The scenario's dataset, read for this run (its notes say what was skipped or estimated)."""
    from kvplan.stress.dataset import load_dataset

    vocab = int(vocab_size if vocab_size is not None else scenario.model_spec().vocab_size)
    return load_dataset(scenario.workload.dataset, seed=scenario.seed, vocab_size=vocab,
                        max_model_len=scenario.max_model_len, num_requests=scenario.num_requests)


def _dataset_requests(scenario: Scenario, stream: DatasetStream) -> Iterator[RequestSpec]:
    """A dataset's requests in replay order, with the scenario's arrivals (same seeding as classes)."""
    arrival_ss = SeedSequence(scenario.seed).spawn(4)[3]
    arrivals = arrival_times(scenario.arrival, _rng(arrival_ss)) if scenario.arrival.type != "concurrency" else None
    name = scenario.workload.dataset.name
    for i, entry in enumerate(stream.take(scenario.num_requests)):
        arrival_s = next(arrivals) if arrivals is not None else None
        if scenario.num_requests is None and arrival_s is not None and arrival_s >= float(scenario.duration_s):
            return
        yield RequestSpec(index=i, request_id=f"req-{i:06d}", class_name=name, arrival_s=arrival_s,
                          prompt_token_ids=entry.prompt_token_ids, output_tokens=entry.output_tokens,
                          shared_prefix_id=None, shared_prefix_tokens=0, is_warmup=i < scenario.warmup_requests,
                          prompt_text=entry.prompt_text)


def generate_requests(
    scenario: Scenario, vocab_size: int | None = None, max_requests: int | None = None
) -> list[RequestSpec]:
    """The whole request stream as a list (`max_requests` caps it; required for closed-loop
    `duration_s` scenarios, whose stream has no end)."""
    if scenario.arrival.type == "concurrency" and scenario.num_requests is None and max_requests is None:
        raise KvplanError(f"scenario {scenario.name!r} is closed-loop with duration_s: its request stream has no end; "
                          "pass max_requests or use iter_requests")
    out: list[RequestSpec] = []
    for spec in iter_requests(scenario, vocab_size):
        if max_requests is not None and len(out) >= max_requests:
            break
        out.append(spec)
    return out
