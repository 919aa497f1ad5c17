"""`TurnChain`: who sends a conversation's next turn, when, and with which prompt, for a sender
that sees real replies (the bundled engine's runner, its simulation): a later turn is due
`think_s` after the turn before it ends, its prompt that turn's prompt, the reply's token ids and
its own new message (`sessions.next_turn_prompt`)."""
from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence

from kvplan.workload.request import Request
from kvplan.workload.sessions import next_turn_prompt


class TurnChain:
    def __init__(self) -> None:
        self._next: dict[str, Request] = {}  # request id -> the turn that follows it
        self._last: dict[str, str] = {}  # session id -> its latest turn's request id
        self._prompts: dict[str, list[int]] = {}  # a sent turn's prompt ids, until it ends
        self.due: list[tuple[float, int, Request, list[int]]] = []  # released turns: (due s, index, turn, prompt)

    def first_turns(self, requests: Iterable[Request]) -> Iterator[Request]:
        """The requests sent on their own arrival times; later turns are kept for their release."""
        for r in requests:
            if r.follows_turn:
                before = self._last.get(r.session_id or "")
                if before is None:
                    raise ValueError(f"turn {r.turn_index} of {r.session_id!r} has no turn before it")
                self._next[before] = r
            else:
                yield r
            if r.session_id is not None:
                self._last[r.session_id] = r.request_id

    def sent(self, request: Request, prompt_ids: list[int]) -> None:
        if request.request_id in self._next or request.session_id is not None:
            self._prompts[request.request_id] = prompt_ids

    def ended(self, request_id: str, reply_ids: Sequence[int], end_s: float) -> None:
        """`request_id` got its last token at `end_s`: its next turn, if any, is released."""
        history = self._prompts.pop(request_id, None)
        turn = self._next.pop(request_id, None)
        if turn is None or history is None:
            return
        prompt = next_turn_prompt(history, list(reply_ids), turn)
        heapq.heappush(self.due, (end_s + turn.think_s, turn.index, turn, prompt))

    def pop_due(self, by_s: float) -> tuple[float, Request, list[int]] | None:
        """The earliest released turn due by `by_s`: (due s, the turn, its prompt ids)."""
        if self.due and self.due[0][0] <= by_s:
            due_s, _, turn, ids = heapq.heappop(self.due)
            return due_s, turn, ids
        return None

    @property
    def next_due_s(self) -> float | None:
        return self.due[0][0] if self.due else None
