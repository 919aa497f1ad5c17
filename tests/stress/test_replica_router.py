"""`ReplicaRouter` on real schedulers and block managers, against hand-derived choices: the rules
are `predict --router`'s (kvplan/perf/router.py docstring): round-robin in turn, least-loaded by
requests routed and unfinished (ties to the lowest index), session affinity, and the KV-aware cost
(blocks to compute past the cached prefix + blocks held + blocks waiting requests will want, lowest
wins), with a hit stopping one token short of the prompt as vLLM's `find_longest_cache_hit` is asked."""
from __future__ import annotations

import pytest

from kvplan.engine.block_manager import BlockManager
from kvplan.engine.sampling_params import SamplingParams
from kvplan.engine.scheduler import Scheduler
from kvplan.engine.sequence import Sequence
from kvplan.stress.replica_router import ReplicaRouter, check_replicas
from kvplan.validation import FieldIssue

BS = 4  # tokens per block


def _schedulers(n: int, num_blocks: int = 32) -> list[Scheduler]:
    return [Scheduler(BlockManager(num_blocks, BS, enable_prefix_caching=True), max_num_seqs=8,
                      max_num_batched_tokens=64) for _ in range(n)]


def _cache(sched: Scheduler, ids: list[int], seq_id: int = 100) -> Sequence:
    """Run `ids` through admission on `sched` (its full blocks registered); returns the sequence."""
    seq = Sequence(seq_id, f"s{seq_id}", ids, SamplingParams(max_tokens=1), 0.0)
    sched.add(seq)
    sched.schedule()
    return seq


def test_round_robin_deals_in_turn_whatever_the_load() -> None:
    router = ReplicaRouter("round-robin", _schedulers(3))
    picks = []
    for i in range(7):
        picks.append(router.pick(f"r{i}", [1, 2, 3], None))
        if i < 2:
            router.finished(f"r{i}")  # replicas 0 and 1 idle again: least-loaded would go back to 0
    assert picks == [0, 1, 2, 0, 1, 2, 0]


def test_least_loaded_counts_unfinished_requests_and_breaks_ties_low() -> None:
    router = ReplicaRouter("least-loaded", _schedulers(3))
    assert [router.pick(f"r{i}", [1], None) for i in range(3)] == [0, 1, 2]
    router.finished("r1")  # replica 1 now has 0, the others 1
    assert router.pick("r3", [1], None) == 1
    router.finished("r0")
    router.finished("r2")  # loads: 0, 1, 0 -> the lowest index of the least loaded
    assert router.pick("r4", [1], None) == 0
    router.finished("unknown")  # a request never routed changes nothing
    assert router.load == [1, 1, 0]
    assert router.pick("s", [1], "conversation") == 2  # a session id means nothing to this policy
    assert router.pick("s2", [1], "conversation") == 0


def test_session_keeps_a_conversation_where_it_started() -> None:
    router = ReplicaRouter("session", _schedulers(2))
    assert router.pick("a0", [1], "a") == 0  # first turns: least-loaded
    assert router.pick("b0", [1], "b") == 1
    assert router.pick("c0", [1], "c") == 0
    router.finished("a0")
    router.finished("b0")  # loads: 1 (c0), 0
    assert router.pick("a1", [1], "a") == 0  # home, though replica 1 is idle
    assert router.pick("a2", [1], "a") == 0
    assert router.pick("x", [1], None) == 1  # no session: least-loaded (loads 3, 0)
    assert router.pick("y", [1], None) == 1  # and no home kept for it (loads 3, 1)
    assert router.pick("d0", [1], "d") == 1  # a new conversation: least-loaded (3, 2)
    assert router.pick("d1", [1], "d") == 1


def test_prefix_scores_blocks_to_compute_plus_blocks_held() -> None:
    scheds = _schedulers(2)
    held = _cache(scheds[0], list(range(1, 13)))  # 12 tokens = 3 full blocks registered on replica 0, held
    router = ReplicaRouter("prefix", scheds)
    prompt = list(range(1, 13)) + [50, 51, 52]  # 15 tokens: 4 blocks; the first 3 cached on replica 0
    # replica 0: 3 held - 3 hit = 0; replica 1: 0 - 0 = 0 -> a tie: the lowest index
    assert router.pick("p0", prompt, None) == 0
    scheds[0].finish(held, "length")  # its blocks stay cached, no longer held: replica 0 costs -3
    assert router.pick("p1", prompt, None) == 0
    other = [90 + i for i in range(15)]  # nothing cached or held anywhere: 0 vs 0 -> replica 0 (tie)
    assert router.pick("p2", other, None) == 0
    _cache(scheds[0], [300 + i for i in range(8)], seq_id=101)  # replica 0 now holds 2 blocks: 2 vs 0
    assert router.pick("p3", other, None) == 1


def test_prefix_counts_the_blocks_waiting_requests_will_want() -> None:
    scheds = _schedulers(2)
    _cache(scheds[0], list(range(500, 520)))  # replica 0 holds 5 blocks
    waiting = Sequence(7, "w", list(range(200, 218)), SamplingParams(max_tokens=1), 0.0)  # 18 tokens: 5 blocks
    scheds[1].add(waiting)  # queued on replica 1, not admitted: holds nothing yet, wants 5 (not 4.5)
    router = ReplicaRouter("prefix", scheds)
    assert router.pick("q", [1, 2, 3, 4, 5, 6, 7], None) == 0  # 5 held vs 5 wanted: a tie, the lowest index


def test_prefix_leaves_the_last_token_to_compute() -> None:
    """A 9-token prompt (bs 4) can hit 2 blocks: (9 - 1) // 4. One of exactly 2 full blocks only the
    first (vLLM computes the last token)."""
    scheds = _schedulers(2)
    scheds[0].finish(_cache(scheds[0], [1, 2, 3, 4]), "length")  # replica 0 caches the first block
    scheds[1].finish(_cache(scheds[1], list(range(1, 9))), "length")  # replica 1 both
    router = ReplicaRouter("prefix", scheds)
    # 8 tokens: replica 0 hits 1, replica 1 1 (not 2) -> a tie: the lowest index
    assert router.pick("r", list(range(1, 9)), None) == 0
    router.finished("r")
    # 9 tokens: replica 0 hits 1, replica 1 hits 2 -> replica 1
    assert router.pick("s", list(range(1, 10)), None) == 1


def test_without_prefix_caching_prefix_routes_by_blocks_held_and_wanted() -> None:
    scheds = [Scheduler(BlockManager(32, BS), max_num_seqs=8, max_num_batched_tokens=64) for _ in range(2)]
    _cache(scheds[0], list(range(1, 9)))  # replica 0 holds 2 blocks, registers none
    router = ReplicaRouter("prefix", scheds)
    assert router.pick("r", list(range(1, 12)), None) == 1


@pytest.mark.parametrize(("replicas", "router", "says"), [
    (1, "prefix", "'prefix' on one replica routes nothing: set replicas to 2 or more, or drop the router"),
    (2, None, "replicas: 2 needs a router: one of round-robin, least-loaded, session, prefix"),
    (2, "random", "'random': choose one of round-robin, least-loaded, session, prefix"),
])
def test_replicas_and_router_that_cannot_run_are_named(replicas: int, router: str | None, says: str) -> None:
    with pytest.raises(FieldIssue, match=says) as info:
        check_replicas(replicas, router)
    assert info.value.subpath == ("router",)


def test_replicas_and_routers_that_run_pass() -> None:
    for replicas, router in ((1, None), (2, "prefix"), (16, "round-robin")):
        check_replicas(replicas, router)
