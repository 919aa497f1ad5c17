"""Conversations sent to an OpenAI server (`workload.sessions` / `conversations` with --target): a
later turn is sent `think_s` after the turn before it got its last token, its prompt that turn's
prompt, the reply the server streamed and the new message, as a chat client resends a history:

    completions   one text: the last prompt, the reply's text, the new message's text
    chat          the last messages, {"role": "assistant", "content": reply}, {"role": "user", ...}

The new message is text of its planned tokens (`--tokenizer`: decoded in the server's vocabulary).
The bundled engine resends the reply's token ids instead (`workload/turns.py`). A turn that fails
ends its conversation: the turns after it are recorded as errors, never sent.

`drive_sessions` sends a run's turns: first turns at their arrival times (open loop, `concurrency`
capping requests in flight) or as N users (closed loop, a conversation's released turn first), and
each later turn once due.
"""
from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from kvplan.results.record import RequestRecord
from kvplan.stress.targets.openai_stream import Progress, StreamClient, make_record
from kvplan.workload.request import Request

Prompt = str | list[dict[str, str]]  # completions text, or chat messages


class TextTurns:
    def __init__(self, api: str, new_text: Callable[[Request], str]) -> None:
        self.api, self.new_text = api, new_text
        self.next: dict[str, Request] = {}  # request id -> the turn that follows it
        self._last: dict[str, str] = {}  # session id -> its latest turn's request id
        self._history: dict[str, Prompt] = {}  # a sent turn's prompt, until it ends
        self.due: list[tuple[float, int, Request]] = []
        self.prompts: dict[str, Prompt] = {}  # a released turn's prompt, until it is sent

    def first_turns(self, requests: Iterable[Request]) -> list[Request]:
        out = []
        for r in requests:
            if r.follows_turn:
                self.next[self._last[r.session_id or ""]] = r
            else:
                out.append(r)
            if r.session_id is not None:
                self._last[r.session_id] = r.request_id
        return out

    def sent(self, spec: Request, prompt: Prompt) -> None:
        if spec.request_id in self.next:
            self._history[spec.request_id] = prompt

    def ended(self, request_id: str, reply: str | None, end_s: float) -> list[Request]:
        """`request_id` ended at `end_s` with `reply` (None: it failed): its next turn is released,
        or, after a failure, the rest of its conversation is returned (never to be sent)."""
        history, turn = self._history.pop(request_id, None), self.next.pop(request_id, None)
        if turn is None:
            return []
        if reply is None or history is None:
            dropped = [turn]
            while dropped[-1].request_id in self.next:
                dropped.append(self.next.pop(dropped[-1].request_id))
            return dropped
        new = self.new_text(turn)
        if self.api == "chat":
            assert isinstance(history, list)
            self.prompts[turn.request_id] = [*history, {"role": "assistant", "content": reply},
                                             {"role": "user", "content": new}]
        else:
            self.prompts[turn.request_id] = f"{history}{reply}{new}"
        heapq.heappush(self.due, (end_s + turn.think_s, turn.index, turn))
        return []

    def pop_due(self, now_s: float) -> tuple[float, Request] | None:
        """(when it was due, the turn) of the earliest turn due by `now_s`."""
        if self.due and self.due[0][0] <= now_s:
            due_s, _, turn = heapq.heappop(self.due)
            return due_s, turn
        return None


class _Driver:
    """One run's sending: `one` request, a closed loop's `user`, an open loop's `guarded` sends."""

    def __init__(self, client: StreamClient, concurrency: int | None, warmup_ids: set[str],
                 on_progress: Callable[[int], None] | None, results: dict[str, RequestRecord],
                 in_flight: dict[str, Progress]) -> None:
        self.client, self.warmup_ids, self.on_progress = client, warmup_ids, on_progress
        self.results, self.in_flight = results, in_flight
        self.turns = TextTurns(client.api, client.message_text)
        self.live: set[asyncio.Task[Any]] = set()
        self.slots = asyncio.Semaphore(concurrency) if concurrency else None

    async def one(self, spec: Request, due_s: float | None = None) -> None:
        """Send `spec` now (a later turn: `due_s` when it was due; the wait for a slot is its queue time)."""
        client, turns = self.client, self.turns
        p = Progress(spec, client.clock_s())
        turns.sent(spec, client.use_prompt(spec, turns.prompts.pop(spec.request_id, None)))
        p.reply = [] if spec.request_id in turns.next else None
        self.in_flight[spec.request_id] = p
        error = await client.send(p)
        del self.in_flight[spec.request_id]
        error = client.scrub(error) if error else None
        now_s = client.clock_s()
        record = make_record(p, "error" if error else "ok", error, now_s,
                             spec.is_warmup or spec.request_id in self.warmup_ids)
        self.results[spec.request_id] = record if due_s is None else \
            replace(record, queue_s=max(0.0, p.arrival_s - due_s))
        for lost in turns.ended(spec.request_id, None if error else "".join(p.reply or ()), now_s):
            self.results[lost.request_id] = make_record(
                Progress(lost, now_s), "error", "not sent: a turn before it in its conversation failed", now_s,
                lost.is_warmup)
        if self.on_progress is not None:
            self.on_progress(len(self.results))

    async def user(self, queue: list[Request]) -> None:
        """A closed loop's user: a released turn first, else a new conversation, until none is left."""
        turns, clock_s = self.turns, self.client.clock_s
        while True:
            released = turns.pop_due(clock_s())
            if released is not None:
                await self.one(released[1], released[0])
            elif queue:
                await self.one(queue.pop(0))
            elif turns.due or self.in_flight:
                await asyncio.sleep(max(0.0, min(0.005, turns.due[0][0] - clock_s())) if turns.due else 0.005)
            else:
                return

    def spawn(self, spec: Request, at_s: float) -> None:
        task = asyncio.create_task(self.guarded(spec, at_s))
        self.live.add(task)
        task.add_done_callback(self.live.discard)

    async def guarded(self, spec: Request, at_s: float) -> None:
        """An open loop's send: when due, within the cap; then the turns this one released."""
        delay_s = at_s - self.client.clock_s()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        if self.slots is not None:
            await self.slots.acquire()
        try:
            await self.one(spec, at_s if spec.follows_turn else None)
            while self.turns.due:
                due_s, _, turn = heapq.heappop(self.turns.due)
                self.spawn(turn, due_s)
        finally:
            if self.slots is not None:
                self.slots.release()


async def drive_sessions(client: StreamClient, requests: list[Request], concurrency: int | None,
                         warmup_ids: set[str], on_progress: Callable[[int], None] | None,
                         results: dict[str, RequestRecord], in_flight: dict[str, Progress]) -> None:
    """Send `requests` (first and later turns) through `client`; records land in `results`."""
    driver = _Driver(client, concurrency, warmup_ids, on_progress, results, in_flight)
    firsts = driver.turns.first_turns(requests)
    if firsts and firsts[0].arrival_s is None:  # closed loop: N users
        queue = list(firsts)
        await asyncio.gather(*(driver.user(queue) for _ in range(min(int(concurrency or 1), len(firsts)))))
        return
    for spec in sorted(firsts, key=lambda r: float(r.arrival_s or 0.0)):
        driver.spawn(spec, float(spec.arrival_s or 0.0))
    while driver.live:
        await asyncio.gather(*list(driver.live))
