"""The synthetic conversation generator (`workload/sessions.py`), against lengths and orders worked
out by hand from its definition: turn t's prompt = shared prefix + first message + t x (reply +
new message); a later turn is sent on its predecessor's reply (no arrival time of its own)."""
from __future__ import annotations

import numpy as np
import pytest
from numpy.random import PCG64, Generator
from pydantic import ValidationError

from kvplan.workload.sessions import Sessions, next_turn_prompt, think_gap

VOCAB = 32_000


def small(**over) -> Sessions:
    knobs = dict(num_sessions=3, turns=3, shared_prefix_tokens=100, first_turn_tokens=50, turn_tokens=10,
                 output_tokens=20, think_time_s=1.5, think_distribution="constant", session_rate_per_s=None)
    return Sessions(**{**knobs, **over})


def test_turn_prompts_grow_by_a_reply_and_a_message() -> None:
    s = small()
    # 100 + 50 = 150; then + (20 + 10) per earlier turn
    assert [s.prompt_tokens(t) for t in range(3)] == [150, 180, 210]
    assert s.longest_tokens == 210 + 20
    assert s.num_requests == 9


def test_requests_are_sessions_in_order_each_with_its_turns_in_order() -> None:
    reqs = small().requests(seed=7, vocab_size=VOCAB)
    assert [r.request_id for r in reqs] == [f"session-{s}-turn-{t}" for s in range(3) for t in range(3)]
    assert [r.index for r in reqs] == list(range(9))
    assert [r.prompt_tokens for r in reqs] == [150, 180, 210] * 3
    assert all(r.output_tokens == 20 for r in reqs)
    first, later = reqs[0::3], [r for r in reqs if r.turn_index]
    assert all(r.arrival_s == 0.0 and not r.follows_turn for r in first)  # no rate: every session at 0
    assert all(r.arrival_s is None and r.follows_turn and r.think_s == 1.5 for r in later)
    assert all(len(r.new_turn_ids) == 10 for r in later)


def test_sessions_share_the_prefix_and_nothing_past_it() -> None:
    reqs = small().requests(seed=7, vocab_size=VOCAB)
    a, b = reqs[0].token_ids, reqs[3].token_ids
    assert len(a) == len(b) == 150
    assert a[:100] == b[:100]  # the shared system / tool prefix
    assert a[100:] != b[100:]  # each session's own first message
    assert reqs[0].shared_prefix_tokens == 100 and reqs[0].shared_prefix_id == "session-prefix"
    assert all(1 <= t < VOCAB for t in a)


def test_without_a_shared_prefix_no_prefix_is_named() -> None:
    r = small(shared_prefix_tokens=0).requests(seed=1, vocab_size=VOCAB)[0]
    assert r.shared_prefix_id is None and r.shared_prefix_tokens == 0 and r.prompt_tokens == 50


def test_the_same_seed_gives_the_same_conversations_and_another_seed_others() -> None:
    s = small(think_distribution="exponential")
    one, two, other = (s.requests(seed=k, vocab_size=VOCAB) for k in (3, 3, 4))
    assert one == two
    assert one[0].token_ids[100:] != other[0].token_ids[100:]


def test_session_starts_are_a_poisson_process_at_the_rate() -> None:
    s = small(num_sessions=4000, turns=1, session_rate_per_s=8.0)
    starts = np.array([r.arrival_s for r in s.requests(seed=0, vocab_size=VOCAB)])
    assert (np.diff(starts) >= 0).all()
    gaps = np.diff(np.concatenate([[0.0], starts]))
    # mean 1/8 s; the standard error of 4,000 exponential gaps is 0.125 / sqrt(4000) = 0.002
    assert abs(gaps.mean() - 0.125) < 5 * 0.125 / np.sqrt(4000)
    assert abs(gaps.std() - 0.125) < 0.01  # exponential: standard deviation = mean


def test_given_starts_are_used_as_they_are() -> None:
    reqs = small().requests(seed=0, vocab_size=VOCAB, starts=[5.0, 1.0, 9.0])
    assert [r.arrival_s for r in reqs[0::3]] == [5.0, 1.0, 9.0]


def test_exponential_think_times_have_the_mean_asked() -> None:
    s = small(num_sessions=2000, turns=2, think_time_s=2.0, think_distribution="exponential")
    thinks = np.array([r.think_s for r in s.requests(seed=0, vocab_size=VOCAB) if r.turn_index])
    assert len(thinks) == 2000
    assert abs(thinks.mean() - 2.0) < 5 * 2.0 / np.sqrt(2000)
    assert len(set(thinks.tolist())) == 2000  # drawn, not constant


def test_think_gap_constant_zero_and_drawn() -> None:
    rng = Generator(PCG64(0))
    assert think_gap(rng, 2.5, "constant") == 2.5
    assert think_gap(rng, 0.0, "exponential") == 0.0  # no gap to draw
    assert think_gap(rng, 2.5, "exponential") != 2.5


def test_next_turn_prompt_is_history_then_reply_then_the_new_message() -> None:
    later = small().requests(seed=2, vocab_size=VOCAB)[1]
    assert next_turn_prompt([1, 2, 3], [7, 8], later) == [1, 2, 3, 7, 8, *later.new_turn_ids]


def test_more_turns_than_a_run_may_send_is_refused_naming_turns() -> None:
    with pytest.raises(ValidationError, match="1000000 sessions x 2 turns = 2000000 requests"):
        Sessions(num_sessions=1_000_000, turns=2)
