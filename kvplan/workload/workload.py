"""`Workload`: what a scenario sends, either classes of drawn lengths or a dataset file, and the
seeded request stream it gives with an arrival process.

Determinism: the same workload and seed give the same stream on every run and machine. The seed
feeds a `SeedSequence` whose children drive four independent `Generator(PCG64)` streams (class
choice, lengths, token ids, arrival gaps), so changing the arrival process leaves the requests'
contents unchanged: a paged and a contiguous run, or a Poisson and a constant run, see the same
prompts. A dataset's requests take the same arrival stream.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import count

import numpy as np
from numpy.random import PCG64, Generator, SeedSequence
from pydantic import Field, model_validator

from kvplan.errors import KvplanError
from kvplan.validation import FieldIssue, StrictModel
from kvplan.workload.arrivals import Arrival, ClosedLoop
from kvplan.workload.classes import RequestClass, prefix_token_ids
from kvplan.workload.conversations import Conversations
from kvplan.workload.datasets import DatasetStream, load_dataset
from kvplan.workload.datasets.ref import DATASET_NAMES, DatasetRef
from kvplan.workload.lengths import sample_length
from kvplan.workload.limits import MAX_REQUESTS, SPECIAL_TOKEN_IDS
from kvplan.workload.prefix_cache import with_cached_tokens
from kvplan.workload.prefix_repetition import PrefixRepetition
from kvplan.workload.request import Request
from kvplan.workload.sessions import Sessions


class Workload(StrictModel):
    classes: list[RequestClass] | None = Field(default=None, min_length=1, max_length=256)
    dataset: DatasetRef | None = None
    prefix_repetition: PrefixRepetition | None = None  # vLLM's synthetic prefix_repetition dataset
    sessions: Sessions | None = None  # conversations: the arrival process starts sessions, not requests
    conversations: Conversations | None = None  # conversations read from a ShareGPT-format file

    @model_validator(mode="after")
    def _check(self) -> Workload:
        given = [k for k in ("classes", "dataset", "prefix_repetition", "sessions", "conversations")
                 if getattr(self, k) is not None]
        if len(given) > 1:
            raise FieldIssue((given[-1],), "give one of workload.classes, workload.dataset, "
                             f"workload.prefix_repetition, workload.sessions or workload.conversations; got {given}")
        if self.conversations is not None:
            return self
        if self.sessions is not None:
            if self.sessions.session_rate_per_s is not None:
                raise FieldIssue(("sessions", "session_rate_per_s"), "in a scenario the arrival block starts the "
                                 "sessions (its rate is sessions per second); drop session_rate_per_s")
            return self
        if self.prefix_repetition is not None:
            if self.classes is not None or self.dataset is not None:
                raise FieldIssue(("prefix_repetition",), "give one of workload.classes, workload.dataset or "
                                 "workload.prefix_repetition")
            return self
        if self.classes is None:
            if self.dataset is None:
                raise FieldIssue(
                    ("classes",),
                    "give exactly one of workload.classes (lengths drawn from "
                    f"distributions) or workload.dataset (a file of requests: {', '.join(DATASET_NAMES)}); "
                    "neither given",
                )
            return self
        if self.dataset is not None:
            raise FieldIssue(("classes",), "give exactly one of workload.classes (lengths drawn from distributions) "
                             f"or workload.dataset (a file of requests: {', '.join(DATASET_NAMES)}); both given")
        if sum(c.weight for c in self.classes) <= 0:
            raise FieldIssue(("classes",), "class weights sum to 0; give at least one class a positive weight")
        seen: dict[str, int] = {}
        prefixes: dict[str, int] = {}
        for i, c in enumerate(self.classes):
            if c.name in seen:
                raise FieldIssue(
                    ("classes", i, "name"), f"duplicate class name {c.name!r} (also classes[{seen[c.name]}])"
                )
            seen[c.name] = i
            if c.shared_prefix is not None:
                first = prefixes.setdefault(c.shared_prefix.id, c.shared_prefix.tokens)
                if first != c.shared_prefix.tokens:
                    raise FieldIssue(("classes", i, "shared_prefix", "tokens"), f"prefix {c.shared_prefix.id!r} has "
                                     f"{c.shared_prefix.tokens} tokens here but {first} in another class")
        return self


@dataclass(frozen=True)
class StreamSettings:
    """How long a stream runs and what it may hold: `num_requests` of them, or (open loop) those
    arriving before `duration_s`; a closed loop with `duration_s` streams forever (the runner stops)."""

    seed: int
    vocab_size: int
    max_model_len: int
    num_requests: int | None
    duration_s: float | None
    warmup_requests: int = 0


def _rng(seed_seq: SeedSequence) -> Generator:
    return Generator(PCG64(seed_seq))


def _lengths(c: RequestClass, rng: Generator, max_model_len: int) -> tuple[int, int]:
    """(prompt, output) tokens: output first, then the prompt clipped to max_model_len - output."""
    output = sample_length(c.output_tokens, rng, 1, max_model_len - c.min_prompt_tokens)
    prompt = sample_length(c.prompt_tokens, rng, c.prefix_tokens + 1, max_model_len - output)
    return prompt, output


def dataset_stream(workload: Workload, run: StreamSettings) -> DatasetStream:
    """The workload's dataset, read for this run (its notes say what was skipped or estimated)."""
    if workload.dataset is None:
        raise KvplanError("this workload draws its requests from classes; it has no dataset")
    return load_dataset(workload.dataset, seed=run.seed, vocab_size=run.vocab_size,
                        max_model_len=run.max_model_len, num_requests=run.num_requests)


def iter_requests(workload: Workload, arrival: Arrival, run: StreamSettings,
                  stream: DatasetStream | None = None) -> Iterator[Request]:
    """The request stream. A dataset workload replays its file (`stream`, when already read, else read here)."""
    if run.vocab_size <= SPECIAL_TOKEN_IDS:
        raise KvplanError(
            f"vocab_size {run.vocab_size} leaves no ordinary token ids (0..{SPECIAL_TOKEN_IDS - 1} are special)"
        )
    class_ss, length_ss, token_ss, arrival_ss = SeedSequence(run.seed).spawn(4)
    if workload.sessions is not None:
        yield from _session_stream(workload.sessions, arrival, run, _rng(arrival_ss))
        return
    if workload.conversations is not None:
        yield from _conversation_stream(workload.conversations, arrival, run, _rng(arrival_ss))
        return
    arrivals = None if isinstance(arrival, ClosedLoop) else arrival.times(_rng(arrival_ss), run.num_requests)
    for i, base in enumerate(_bodies(workload, run, stream, class_ss, length_ss, token_ss)):
        if run.num_requests is not None and i >= run.num_requests:
            return
        arrival_s = next(arrivals) if arrivals is not None else None
        if run.num_requests is None and arrival_s is not None and arrival_s >= float(run.duration_s or 0.0):
            return
        yield replace(base, arrival_s=arrival_s, index=i, request_id=f"req-{i:06d}", is_warmup=i < run.warmup_requests)


def _session_stream(sessions: Sessions, arrival: Arrival, run: StreamSettings, rng: Generator) -> Iterator[Request]:
    """Every turn of every session; the arrival process gives the sessions' start times (a closed
    loop: all at once, its concurrency caps the turns in flight)."""
    if run.num_requests is not None and run.num_requests != sessions.num_requests:
        raise KvplanError(f"num_requests {run.num_requests} is not the sessions' {sessions.num_sessions} x "
                          f"{sessions.turns} = {sessions.num_requests} turns; drop num_requests")
    if sessions.longest_tokens > run.max_model_len:
        raise KvplanError(f"a session's last turn holds {sessions.longest_tokens} tokens (prompt and reply), above "
                          f"max_model_len {run.max_model_len}; use fewer turns or shorter messages")
    if isinstance(arrival, ClosedLoop):  # every first turn due at once, sent as the client's slots allow
        for r in sessions.requests(run.seed, run.vocab_size, starts=[0.0] * sessions.num_sessions):
            yield replace(r, arrival_s=None) if not r.follows_turn else r
        return
    starts = arrival.times(rng, sessions.num_sessions)
    yield from sessions.requests(run.seed, run.vocab_size, starts=[next(starts) for _ in range(sessions.num_sessions)])


def _conversation_stream(conv: Conversations, arrival: Arrival, run: StreamSettings,
                         rng: Generator) -> Iterator[Request]:
    """A conversation file's turns; the arrival process starts the conversations (a closed loop: all
    at once, its concurrency caps the turns in flight)."""
    starts = None if isinstance(arrival, ClosedLoop) else arrival.times(rng, conv.num_sessions or MAX_REQUESTS)
    for r in conv.requests(run.seed, run.vocab_size, run.max_model_len, starts, []):
        yield replace(r, arrival_s=None) if starts is None and not r.follows_turn else r


def _bodies(workload: Workload, run: StreamSettings, stream: DatasetStream | None, class_ss: SeedSequence,
            length_ss: SeedSequence, token_ss: SeedSequence) -> Iterator[Request]:
    """Each request's contents in stream order (forever; the caller stops)."""
    if workload.prefix_repetition is not None:
        yield from workload.prefix_repetition.requests(run.num_requests, run.seed, run.vocab_size, run.max_model_len,
                                                       _rng(token_ss))
        return
    if workload.dataset is not None:
        name = workload.dataset.name
        for entry in (stream or dataset_stream(workload, run)).take(run.num_requests):
            yield replace(entry, class_name=name)
        return
    assert workload.classes is not None, "a workload has classes or a dataset"
    classes = workload.classes
    class_rng, length_rng, token_rng = map(_rng, (class_ss, length_ss, token_ss))
    weights = np.array([c.weight for c in classes], dtype=np.float64)
    weights /= weights.sum()
    prefixes = {c.shared_prefix.id: prefix_token_ids(run.seed, c.shared_prefix.id, c.shared_prefix.tokens,
                                                     run.vocab_size)
                for c in classes if c.shared_prefix}
    for _ in count():
        c = classes[int(class_rng.choice(len(classes), p=weights))]
        prompt, output = _lengths(c, length_rng, run.max_model_len)
        prefix = prefixes[c.shared_prefix.id] if c.shared_prefix else ()
        unique = token_rng.integers(SPECIAL_TOKEN_IDS, run.vocab_size, size=prompt - len(prefix))
        yield Request.of_ids(tuple(prefix) + tuple(int(t) for t in unique), output, None, class_name=c.name,
                             shared_prefix_id=c.shared_prefix.id if c.shared_prefix else None,
                             shared_prefix_tokens=len(prefix))


def generate_requests(workload: Workload, arrival: Arrival, run: StreamSettings,
                      max_requests: int | None = None) -> list[Request]:
    """The whole request stream as a list (`max_requests` caps it; required for a closed loop with
    `duration_s`, whose stream has no end)."""
    if arrival.closed_loop and run.num_requests is None and max_requests is None:
        raise KvplanError("a closed loop with duration_s has no end to its request stream; "
                          "pass max_requests or use iter_requests")
    out: list[Request] = []
    for r in iter_requests(workload, arrival, run):
        if max_requests is not None and len(out) >= max_requests:
            break
        out.append(r)
    return out


def as_sent(requests: list[Request], block_size: int, prefix_caching: bool = True) -> list[Request]:
    """The requests a benchmark's figures count (warm-up dropped), a closed loop's sent at 0 as its
    slots allow. With prefix caching and a warm-up, each prompt's blocks an earlier request (warm-up
    included) had are marked hits beforehand, as a cache that never evicts would serve them;
    without a warm-up the simulation's own block pool finds the hits (and the evictions)."""
    warm = any(r.is_warmup for r in requests)
    cached = with_cached_tokens(requests, block_size) if prefix_caching and warm else requests
    return [replace(r, arrival_s=r.arrival_s or 0.0) for r in cached if not r.is_warmup]
