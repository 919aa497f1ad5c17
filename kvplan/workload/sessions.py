"""Conversations: multi-turn chat and agent loops, as sessions that arrive, not requests.

A session's first turn is a shared system/tool prefix (the same ids in every session) and a first
message; each later turn resends the whole conversation, the replies included, plus a new message
(a user turn, or a tool's result in an agent loop), `think_time_s` after the last reply ended. So
the cost of a turn depends on whether its history is still in the prefix cache.

Token ids come from the seed: each session's first message is its own, so no two sessions share
blocks past the shared prefix (and a greedy model's replies cannot alias across sessions either).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.random import PCG64, Generator, SeedSequence
from pydantic import Field, model_validator

from kvplan.validation import FieldIssue, StrictModel
from kvplan.workload.classes import prefix_token_ids
from kvplan.workload.limits import MAX_RATE_PER_S, MAX_REQUESTS, MIN_RATE_PER_S, SPECIAL_TOKEN_IDS
from kvplan.workload.request import Request

MAX_TURN_TOKENS = 2**21  # one message or reply: past any model's context
MAX_THINK_S = 86_400.0
_SESSION_SALT = 0x53455353  # "SESS": keeps session streams apart from request streams


class Sessions(StrictModel):
    """The synthetic conversation generator's knobs (one name each, as on the CLI)."""

    num_sessions: int = Field(default=100, ge=1, le=MAX_REQUESTS)
    turns: int = Field(default=4, ge=1, le=10_000)
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_TURN_TOKENS)  # system prompt / tool definitions
    first_turn_tokens: int = Field(default=256, ge=1, le=MAX_TURN_TOKENS)  # the first message
    turn_tokens: int = Field(default=128, ge=1, le=MAX_TURN_TOKENS)  # each later turn's new message
    output_tokens: int = Field(default=128, ge=1, le=MAX_TURN_TOKENS)  # each reply (ignore_eos)
    think_time_s: float = Field(default=1.0, ge=0, le=MAX_THINK_S)  # mean gap between a reply and the next turn
    think_distribution: Literal["constant", "exponential"] = "exponential"
    session_rate_per_s: float | None = Field(default=None, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)  # None: all at 0

    @model_validator(mode="after")
    def _bounded(self) -> Sessions:
        if self.num_sessions * self.turns > MAX_REQUESTS:
            raise FieldIssue(("turns",), f"{self.num_sessions} sessions x {self.turns} turns = "
                             f"{self.num_sessions * self.turns} requests, above the {MAX_REQUESTS} a run may send")
        return self

    @property
    def num_requests(self) -> int:
        return self.num_sessions * self.turns

    def prompt_tokens(self, turn: int) -> int:
        """The prompt of turn `turn` (from 0): prefix, first message, then per earlier turn its reply
        and the next message."""
        return self.shared_prefix_tokens + self.first_turn_tokens + turn * (self.output_tokens + self.turn_tokens)

    @property
    def longest_tokens(self) -> int:
        """The last turn's prompt and reply: what max_model_len must hold."""
        return self.prompt_tokens(self.turns - 1) + self.output_tokens

    def requests(self, seed: int, vocab_size: int, starts: list[float] | None = None) -> list[Request]:
        """Every turn of every session, sessions in start order and each session's turns in order;
        `starts`: the sessions' start times (else from session_rate_per_s)."""
        rng = Generator(PCG64(SeedSequence([seed, _SESSION_SALT])))
        prefix = prefix_token_ids(seed, "session-prefix", self.shared_prefix_tokens, vocab_size)
        starts = self._starts(rng) if starts is None else starts
        out: list[Request] = []
        for s in range(self.num_sessions):
            sid = f"session-{s}"
            ids = rng.integers(SPECIAL_TOKEN_IDS, vocab_size, self.first_turn_tokens
                               + (self.turns - 1) * self.turn_tokens).astype(np.uint32)
            first = prefix + tuple(ids[:self.first_turn_tokens].tolist())
            out.append(Request.of_ids(first, self.output_tokens, starts[s], index=len(out),
                                      request_id=f"{sid}-turn-0", class_name="session", session_id=sid,
                                      shared_prefix_id="session-prefix" if prefix else None,
                                      shared_prefix_tokens=len(prefix)))
            for t in range(1, self.turns):
                at = self.first_turn_tokens + (t - 1) * self.turn_tokens
                out.append(Request(None, self.prompt_tokens(t), self.output_tokens, index=len(out),
                                   request_id=f"{sid}-turn-{t}", class_name="session", session_id=sid,
                                   turn_index=t, think_s=self._think(rng),
                                   turn_ids=ids[at:at + self.turn_tokens].tobytes()))
        return out

    def _starts(self, rng: Generator) -> list[float]:
        if self.session_rate_per_s is None:
            return [0.0] * self.num_sessions
        gaps = rng.exponential(1.0 / self.session_rate_per_s, self.num_sessions)
        return [float(x) for x in gaps.cumsum()]

    def _think(self, rng: Generator) -> float:
        return think_gap(rng, self.think_time_s, self.think_distribution)


def think_gap(rng: Generator, mean_s: float, distribution: str) -> float:
    """One gap between a reply and the next turn: `mean_s`, or drawn exponential with that mean."""
    if distribution == "constant" or mean_s == 0:
        return mean_s
    return float(rng.exponential(mean_s))


def next_turn_prompt(history: list[int], reply: list[int], turn: Request) -> list[int]:
    """A later turn's prompt: the conversation so far (last prompt), the reply it got, the new message."""
    return [*history, *reply, *turn.new_turn_ids]
