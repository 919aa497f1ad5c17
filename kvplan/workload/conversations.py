"""Conversations from a file: ShareGPT-format JSON (a list of `{"conversations": [{"from": "human",
"value": ...}, {"from": "gpt", "value": ...}, ...]}`; `role`/`content` and a `messages` list are
read too), sent as multi-turn sessions (`sessions.py`): each human message is a turn's new
message, the reply after it gives that turn's output length (the server's own reply, not the
file's, goes back into the next prompt, as a client replaying the dataset against a live server
does), a system message is put before the first human one. A conversation is cut before the
first turn whose prompt and reply pass max_model_len (noted); a message longer than any model's
context is bad input, refused before it is tokenized in full.
"""
from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from numpy.random import PCG64, Generator, SeedSequence
from pydantic import Field

from kvplan.errors import KvplanError
from kvplan.validation import StrictModel
from kvplan.workload.datasets.source import MAX_ROWS, dataset_error, read_dataset_text
from kvplan.workload.datasets.text import TokenCounter
from kvplan.workload.limits import MAX_REQUESTS
from kvplan.workload.request import Request
from kvplan.workload.sessions import MAX_THINK_S, MAX_TURN_TOKENS, think_gap

MAX_MESSAGE_BYTES = 16 * MAX_TURN_TOKENS  # past this a message cannot fit any context, whatever the tokenizer
USER, ASSISTANT, SYSTEM = frozenset({"human", "user"}), frozenset({"gpt", "assistant", "chatgpt", "bard"}), "system"
_SALT = 0x434F4E56  # "CONV"


class Conversations(StrictModel):
    path: str = Field(min_length=1, max_length=4096)  # relative paths: from the scenario file's folder
    tokenizer: str | None = Field(default=None, min_length=1, max_length=4096)  # else ~4 bytes a token
    num_sessions: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)  # the first N conversations
    think_time_s: float = Field(default=1.0, ge=0, le=MAX_THINK_S)
    think_distribution: Literal["constant", "exponential"] = "exponential"

    def requests(self, seed: int, vocab_size: int, max_model_len: int, starts: Iterator[float] | None,
                 notes: list[str]) -> list[Request]:
        """Every kept turn of every kept conversation, conversations in file order; `starts`: their
        start times, one drawn per conversation kept (None: all at 0)."""
        path = Path(self.path).expanduser()
        if not path.is_file():
            raise KvplanError(f"conversations {self.path}: no such file")
        try:
            data = json.loads(read_dataset_text(path))
        except json.JSONDecodeError as exc:
            raise dataset_error(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        if not isinstance(data, list):
            raise dataset_error(path, f"a list of conversations, got a {type(data).__name__}")
        counter, rng = TokenCounter(self.tokenizer, vocab_size), Generator(PCG64(SeedSequence([seed, _SALT])))
        out: list[Request] = []
        cut = kept = 0
        for n, entry in enumerate(data[:MAX_ROWS]):
            if self.num_sessions is not None and kept >= self.num_sessions:
                break
            turns = _turns(path, n, entry, counter)
            fitted = _within(turns, max_model_len)
            cut += len(fitted) < len(turns)
            if not fitted:
                continue
            start = 0.0 if starts is None else next(starts)
            out.extend(_session(f"conversation-{n}", fitted, start, len(out), self, rng))
            kept += 1
        if cut:
            notes.append(f"{cut:,} conversations cut before a turn longer than max_model_len {max_model_len:,}")
        if not out:
            raise dataset_error(path, "no conversation with a user message and a reply")
        return out


def _messages(entry: Any) -> list[tuple[str, str]]:
    """(role, text) of an entry's messages, roles lower-cased; [] if it is not a conversation."""
    items = entry.get("conversations", entry.get("messages")) if isinstance(entry, dict) else None
    out = []
    for m in items if isinstance(items, list) else ():
        if isinstance(m, dict):
            role, text = m.get("from", m.get("role")), m.get("value", m.get("content"))
            if isinstance(role, str) and isinstance(text, str):
                out.append((role.lower(), text))
    return out


def _tokens(path: Path, n: int, text: str, counter: TokenCounter) -> list[int]:
    if len(text) > MAX_MESSAGE_BYTES or len(text.encode("utf-8", "replace")) > MAX_MESSAGE_BYTES:
        raise dataset_error(path, f"conversation {n}: a message of {len(text):,} characters, past any model's "
                                  f"context ({MAX_TURN_TOKENS:,} tokens a turn at most)")
    ids = counter.ids(text)
    if len(ids) > MAX_TURN_TOKENS:
        raise dataset_error(path, f"conversation {n}: a message of {len(ids):,} tokens, above the "
                                  f"{MAX_TURN_TOKENS:,} a turn may hold")
    return ids


def _turns(path: Path, n: int, entry: Any, counter: TokenCounter) -> list[tuple[tuple[int, ...], int]]:
    """(new message ids, reply tokens) per turn: a user message and the reply after it."""
    system: list[int] = []
    turns: list[tuple[tuple[int, ...], int]] = []
    pending: list[int] | None = None
    for role, text in _messages(entry):
        if role == SYSTEM and not turns and pending is None:
            system += _tokens(path, n, text, counter)
        elif role in USER:
            ids = _tokens(path, n, text, counter)
            pending = ids if pending is None else pending + ids  # two user messages in a row: one turn
        elif role in ASSISTANT and pending is not None:
            reply = len(_tokens(path, n, text, counter))
            turns.append((counter.fold((system if not turns else []) + pending), max(1, reply)))
            pending = None
    return turns


def _within(turns: list[tuple[tuple[int, ...], int]], max_model_len: int) -> list[tuple[tuple[int, ...], int]]:
    """The turns before the first whose prompt and reply pass max_model_len."""
    total = 0
    for i, (ids, reply) in enumerate(turns):
        if total + len(ids) + reply > max_model_len:
            return turns[:i]
        total += len(ids) + reply
    return turns


def _session(sid: str, turns: list[tuple[tuple[int, ...], int]], start: float, index: int,
             knobs: Conversations, rng: Generator) -> list[Request]:
    first_ids, first_reply = turns[0]
    out = [Request.of_ids(first_ids, first_reply, start, index=index, request_id=f"{sid}-turn-0",
                          class_name="conversation", session_id=sid)]
    prompt = len(first_ids)
    previous_reply = first_reply
    for t, (ids, reply) in enumerate(turns[1:], start=1):
        prompt += previous_reply + len(ids)
        out.append(Request(None, prompt, reply, index=index + t, request_id=f"{sid}-turn-{t}",
                           class_name="conversation", session_id=sid, turn_index=t,
                           think_s=think_gap(rng, knobs.think_time_s, knobs.think_distribution),
                           turn_ids=array("I", ids).tobytes()))
        previous_reply = reply
    return out
