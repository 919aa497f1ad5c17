"""`RouteRule`, the one routing rule of `predict --router` and of `kvplan stress` with replicas,
against sequences worked by hand from each policy's definition (llm-d's load-aware scorer reduced to
queue depth; Dynamo's KV-router cost with overlap weight 1)."""
from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.perf.route_rule import POLICIES, RouteRule, check_router, lowest


def never() -> list[int]:
    raise AssertionError("this policy must not read that state")


def test_round_robin_goes_in_turn_and_reads_no_state() -> None:
    rule = RouteRule("round-robin", 3)
    assert [rule.pick(None, never, never) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_loaded_takes_the_fewest_and_the_lowest_of_equals() -> None:
    rule = RouteRule("least-loaded", 4)
    assert rule.pick(None, lambda: [3, 1, 1, 2], never) == 1  # 1 and 2 tie at one request: the lower
    assert rule.pick("s", lambda: [0, 5, 5, 0], never) == 0
    assert rule.pick("s", lambda: [4, 5, 5, 0], never) == 3  # least-loaded ignores the session


def test_session_keeps_a_conversation_where_its_first_turn_went() -> None:
    rule = RouteRule("session", 3)
    assert rule.pick("a", lambda: [2, 0, 1], never) == 1  # first turn: least-loaded
    assert rule.pick("b", lambda: [2, 1, 0], never) == 2
    assert rule.pick("a", never, never) == 1  # later turns: home, whatever the loads
    assert rule.pick("b", never, never) == 2
    assert rule.pick(None, lambda: [0, 3, 3], never) == 0  # a single request: least-loaded, no home


def test_prefix_takes_the_lowest_kv_cost_and_the_lowest_of_equals() -> None:
    rule = RouteRule("prefix", 3)
    # replica 0 holds 10 blocks and caches none of the prompt's 8; replica 1 holds 14 and caches
    # 6 of them; replica 2 holds 12 and caches 4: costs 8 - 0 + 10 = 18, 8 - 6 + 14 = 16, 8 - 4 + 12 = 16
    assert rule.pick("a", never, lambda: [18, 16, 16]) == 1
    assert rule.pick("a", never, lambda: [5, 9, 9]) == 0  # no session stickiness under "prefix"


def test_lowest_is_the_first_minimum() -> None:
    assert lowest([3, 1, 2, 1]) == 1 and lowest([0]) == 0 and lowest([2, 2]) == 0


def test_an_unknown_policy_is_one_line_naming_the_choices() -> None:
    with pytest.raises(KvplanError, match="--router 'random': choose one of round-robin, least-loaded, session, "
                                          "prefix"):
        RouteRule("random", 2)
    assert [check_router(p) for p in POLICIES] == list(POLICIES)
