"""`TurnChain`: a later turn is released only when the turn before it ends, due `think_s` later,
with the conversation so far, the real reply and its own new message as its prompt; worked by hand."""
from __future__ import annotations

from array import array

import pytest

from kvplan.workload.request import Request
from kvplan.workload.turns import TurnChain


def turn(sid: str, t: int, think_s: float = 0.0, new: bytes = b"") -> Request:
    return Request(0.0 if t == 0 else None, 4, 2, request_id=f"{sid}-{t}", session_id=sid, turn_index=t,
                   think_s=think_s, turn_ids=new or None, index=10 * ord(sid[0]) + t)


def ids(*values: int) -> bytes:
    return array("I", values).tobytes()


def test_only_first_turns_are_sent_on_their_own() -> None:
    chain = TurnChain()
    reqs = [turn("a", 0), turn("a", 1, 1.0), turn("b", 0), turn("a", 2, 1.0)]
    assert [r.request_id for r in chain.first_turns(reqs)] == ["a-0", "b-0"]
    assert chain.next_due_s is None  # nothing released before a reply ends


def test_a_turn_with_no_turn_before_it_is_refused() -> None:
    with pytest.raises(ValueError, match="turn 1 of 'x' has no turn before it"):
        list(TurnChain().first_turns([turn("x", 1)]))


def test_an_ended_turn_releases_the_next_with_history_reply_and_message() -> None:
    chain = TurnChain()
    first, second = turn("a", 0), turn("a", 1, think_s=2.0, new=ids(9, 9))
    list(chain.first_turns([first, second]))
    chain.sent(first, [1, 2, 3, 4])
    chain.ended("a-0", [5, 6], end_s=10.0)
    assert chain.next_due_s == 12.0
    assert chain.pop_due(11.9) is None  # not due yet
    due_s, released, prompt = chain.pop_due(12.0)
    assert (due_s, released.request_id, prompt) == (12.0, "a-1", [1, 2, 3, 4, 5, 6, 9, 9])
    assert chain.next_due_s is None


def test_released_turns_come_out_earliest_due_first() -> None:
    chain = TurnChain()
    reqs = [turn("a", 0), turn("a", 1, think_s=5.0), turn("b", 0), turn("b", 1, think_s=1.0)]
    list(chain.first_turns(reqs))
    chain.sent(reqs[0], [1])
    chain.sent(reqs[2], [2])
    chain.ended("a-0", [], end_s=1.0)  # due 6.0
    chain.ended("b-0", [], end_s=3.0)  # due 4.0: ended later, due sooner
    assert [chain.pop_due(100.0)[1].request_id for _ in range(2)] == ["b-1", "a-1"]


def test_a_last_turn_ending_releases_nothing() -> None:
    chain = TurnChain()
    only = turn("a", 0)
    list(chain.first_turns([only]))
    chain.sent(only, [1, 2])
    chain.ended("a-0", [3], end_s=1.0)
    assert chain.next_due_s is None and chain.pop_due(99.0) is None
