"""Replicas behind a router (kvplan.perf.router), on a schedule worked out by hand: 1 s steps,
block size 4. A0 (8 tokens, 2 out) is a conversation's first turn, C and D (8 tokens, 20 out) are
single requests, all sent at t=0 in that order; A1 (A0, its 2-token reply and 3 new tokens: 13)
is released when A0 ends at t=2, while C and D still decode. A0 computed 8 + 1 tokens: 2 full
blocks, so A1 hits 8 tokens where A0 ran and nothing elsewhere."""
from __future__ import annotations

import pytest

from kvplan.perf.router import simulate_routed
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepShape
from kvplan.workload.request import Request


class OneSecond:
    def step_s(self, shape: StepShape) -> float:
        return 1.0


def workload() -> list[Request]:
    a0 = Request.of_ids(range(10, 18), 2, 0.0, session_id="a", index=0)
    new = b"".join(t.to_bytes(4, "little") for t in (30, 31, 32))
    a1 = Request(None, 13, 2, session_id="a", turn_index=1, think_s=0.0, index=1, turn_ids=new)
    c = Request.of_ids(range(100, 108), 20, 0.0, index=2)
    d = Request.of_ids(range(200, 208), 20, 0.0, index=3)
    return [a0, a1, c, d]


def route(policy: str) -> tuple[list[int], list[float]]:
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    _, shares = simulate_routed(workload(), config, OneSecond(), 2, policy)
    return [s["requests"] for s in shares], [s["prefix_cache_hits_tokens"] for s in shares]


@pytest.mark.parametrize(("policy", "per_replica", "hits"), [
    # in turn: A0 r0, C r1, D r0, A1 r1 (away from its history)
    ("round-robin", [2, 2], [0, 0]),
    # A0 r0 (a tie: the lowest), C r1, D r0 (1 each: the lowest), A1 back to A0's replica
    ("session", [3, 1], [8, 0]),
    # Dynamo's cost (blocks to compute + blocks held or wanted by requests sent there): A0 r0 (2 + 0
    # vs 2 + 0), C r1 (2 + A0's 2 vs 2 + 0),
    # D r0 (a tie, 4 each), A1 r0 (4 - 2 + D's 3 = 5 vs 4 - 0 + C's 3 = 7)
    ("prefix", [3, 1], [8, 0]),
    # by load alone: A0 r0, C r1, D r0; at t=2 r0 holds D, r1 holds C: a tie, the lowest
    ("least-loaded", [3, 1], [8, 0]),
])
def test_each_policy_routes_as_worked_out(policy: str, per_replica: list[int], hits: list[float]) -> None:
    assert route(policy) == (per_replica, hits)


def test_replicas_and_router_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    from kvplan.cli import main

    base = ["predict", "--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--sessions", "4"]
    for extra, needle in ((["--router", "prefix"], "--replicas 2 or more, got 1"),
                          (["--replicas", "3"], "--replicas 3 needs --router"),
                          (["--replicas", "2", "--router", "random"], "--router 'random'"),
                          (["--replicas", "2", "--router", "prefix", "--dp", "2"], "not modelled")):
        with pytest.raises(SystemExit) as info:
            main([*base, *extra])
        err = capsys.readouterr().err
        assert info.value.code == 2 and needle in err and err.count("\n") == 1, err


def test_goodput_counts_requests_within_every_limit() -> None:
    """One request, 1 s steps: TTFT 1 s, TPOT 1 s, E2EL 3 s over a 3 s run (vLLM's request_goodput:
    requests meeting every --goodput limit, per second)."""
    from kvplan.perf.bench_metrics import bench_figures
    from kvplan.perf.schedule import simulate
    from kvplan.results.slo import parse_goodput

    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    trace = simulate([Request.of_ids(range(10, 18), 3, 0.0)], config, OneSecond())
    assert bench_figures(trace, 0.0, parse_goodput(["ttft:1000,tpot:1000", "e2el:3000"]))["request_goodput"] == \
        pytest.approx(1 / 3)
    assert bench_figures(trace, 0.0, parse_goodput(["ttft:999"]))["request_goodput"] == 0.0
    assert "request_goodput" not in bench_figures(trace, 0.0)


@pytest.mark.parametrize("bad", ["ttft", "itl:5", "ttft:-1", "ttft:x"])
def test_a_bad_goodput_is_refused(bad: str) -> None:
    from kvplan.errors import KvplanError
    from kvplan.results.slo import parse_goodput

    with pytest.raises(KvplanError, match="--goodput"):
        parse_goodput([bad])


def test_data_parallel_ranks_keep_a_conversation_together() -> None:
    """--dp without a router: first turns and single requests dealt in turn, a later turn to the
    rank its conversation started on (else its history could never hit)."""
    from kvplan.perf.predict import _deal

    reqs = workload() + [Request.of_ids(range(300, 308), 2, 0.0, session_id="b", index=4),
                         Request(None, 13, 2, session_id="b", turn_index=1, index=5, turn_ids=b"\x05\x00\x00\x00")]
    shares = _deal(reqs, 2)
    ranks = {r.request_id or r.index: i for i, share in enumerate(shares) for r in share}
    # dealt in turn: A0 -> 0, C -> 1, D -> 0, B0 -> 1; A1 follows A0, B1 follows B0
    assert [ranks[i] for i in (0, 2, 3, 4)] == [0, 1, 0, 1]
    assert ranks[1] == ranks[0] and ranks[5] == ranks[4]


def busy_home(history_tokens: int) -> list[Request]:
    """A0 (`history_tokens`, 2 out) and three single requests sent at t=0 in the order A0, C, D, E
    (8 tokens each; C and E 2 out, D 20 out); A1 = A0's history + its 2-token reply + 3 new tokens,
    released at t=2 when A0 ends, as C and E end too and D decodes on: D then holds 3 blocks (9
    tokens computed)."""
    a0 = Request.of_ids(range(10, 10 + history_tokens), 2, 0.0, session_id="a", index=0)
    new = b"".join(t.to_bytes(4, "little") for t in (30, 31, 32))
    a1 = Request(None, history_tokens + 5, 2, session_id="a", turn_index=1, think_s=0.0, index=1, turn_ids=new)
    c = Request.of_ids(range(100, 108), 2, 0.0, index=2)
    d = Request.of_ids(range(200, 208), 20, 0.0, index=3)
    e = Request.of_ids(range(300, 308), 2, 0.0, index=4)
    return [a0, a1, c, d, e]


def route_busy(policy: str, history_tokens: int) -> tuple[list[int], list[float]]:
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    _, shares = simulate_routed(busy_home(history_tokens), config, OneSecond(), 2, policy)
    return [s["requests"] for s in shares], [s["prefix_cache_hits_tokens"] for s in shares]


@pytest.mark.parametrize(("policy", "history", "per_replica", "hits"), [
    # first turns by load: A0 r0, C r1, D r0, E r1; at t=2 r0 holds D, r1 nothing
    ("least-loaded", 8, [2, 3], [0, 0]),  # A1 to the idle r1, away from its history
    ("session", 8, [3, 2], [8, 0]),  # A1 home to r0: A0's 2 full blocks hit
    ("round-robin", 8, [3, 2], [8, 0]),  # A1 is the fifth sent: r0
    # prefix, 8-token history: A0 r0 (2 vs 2), C r1 (2 + 2 queued vs 2), D r0 (4 vs 4), E r1 (6 vs
    # 4); A1 (13 tokens: 4 blocks) r0: 4 - 2 hit + D's 3 = 5, r1: 4 -> r1
    ("prefix", 8, [2, 3], [0, 0]),
    # prefix, 16-token history (4 blocks): A0 r0, C r1 (6 vs 2), D r1 (6 vs 4), E r0 (6 vs 6);
    # A1 (21 tokens: 6 blocks) r0: 6 - 4 hit + 0 = 2, r1: 6 + D's 3 = 9 -> r0, its 16 tokens hit
    ("prefix", 16, [3, 2], [16, 0]),
    ("least-loaded", 16, [2, 3], [0, 0]),
])
def test_policies_part_where_their_rules_differ(policy: str, history: int, per_replica: list[int],
                                               hits: list[float]) -> None:
    assert route_busy(policy, history) == (per_replica, hits)


def test_a_client_slot_holds_a_request_until_one_frees() -> None:
    """--max-concurrency 1 over two replicas: one request in flight at a time, each held one sent
    (and timed) as the step that frees the slot ends, a conversation's released turn first, as one
    engine's client sends them: A0 0-2, A1 2-4, C 4-6, D 6-26, E 26-28."""
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    traces, _ = simulate_routed(busy_home(8), config, OneSecond(), 2, "least-loaded", max_concurrency=1)
    runs = sorted((float(s), float(e), int(p)) for t in traces
                  for s, e, p in zip(t.send_s, t.last_token_s, t.prompt_tokens))
    assert runs == [(0.0, 2.0, 8), (2.0, 4.0, 13), (4.0, 6.0, 8), (6.0, 26.0, 8), (26.0, 28.0, 8)]


def test_a_request_in_the_api_server_counts_once() -> None:
    """API server 0.5 s a request, 1 s steps, least-loaded. B (t=0, 1 out) -> r0, in its API server
    until 0.5, first token 1.5, done; A (t=0.1, 20 out) -> r1 (r0 holds B); D (t=1.6) -> the idle
    r0, in its API server until 2.1; C (t=1.8): r0 holds D, r1 holds A, one each: a tie, r0."""
    reqs = [Request.of_ids(range(10, 18), 1, 0.0, index=0), Request.of_ids(range(100, 108), 20, 0.1, index=1),
            Request.of_ids(range(200, 208), 2, 1.6, index=2), Request.of_ids(range(300, 308), 2, 1.8, index=3)]
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    traces, shares = simulate_routed(reqs, config, OneSecond(), 2, "least-loaded", frontend_s=0.5)
    assert [s["requests"] for s in shares] == [3, 1]
    assert float(traces[0].first_token_s[0]) == 1.5  # B: its API server, then one step


def test_an_unknown_router_names_the_choices() -> None:
    from kvplan.errors import KvplanError
    from kvplan.perf.route_rule import check_router

    with pytest.raises(KvplanError) as info:
        check_router("random")
    assert str(info.value) == "--router 'random': choose one of round-robin, least-loaded, session, prefix"


def test_the_kv_aware_cost_of_each_replica_by_hand() -> None:
    """Blocks of 4. Replica 0 holds 3 blocks, two of them the prompt's [1-4] [5-8], and queues a
    5-token request (2 blocks); replica 1 holds 1 block, [1-4], and queues 8 + 1 tokens (2 + 1
    blocks). A 9-token prompt looks up its 2 full blocks before its last token: 3 + 2 - 2 = 3 and
    1 + 3 - 1 = 3. An 8-token prompt looks up only [1-4] (its last token's block is computed
    anyway): 3 + 2 - 1 = 4 and 3."""
    from types import SimpleNamespace

    from kvplan.kvpool.block_hash import TokenStream
    from kvplan.kvpool.block_pool import BlockPool
    from kvplan.perf.router import Router

    hashes = TokenStream(4, range(1, 10)).block_hashes(2)

    def engine(cached: int, held: int, queued: list[int], where: str) -> SimpleNamespace:
        pool = BlockPool(10)
        pool.cache_blocks(pool.allocate(held), hashes, 0, cached)
        reqs = [SimpleNamespace(known=k) for k in queued]
        lists = {"pending": [], "frontend": [], "held": [], "waiting": []}
        lists[where] = reqs
        return SimpleNamespace(config=SimpleNamespace(block_size=4), pool=pool, **lists)

    engines = [engine(2, 3, [5], "waiting"), engine(1, 1, [8], "pending")]
    engines[1].frontend = [SimpleNamespace(known=1)]
    router = Router("prefix", engines, {})
    nine = SimpleNamespace(known=9, stream=TokenStream(4, range(1, 10)))
    eight = SimpleNamespace(known=8, stream=TokenStream(4, range(1, 9)))
    assert router._kv_costs(nine) == [3, 3]
    assert router._kv_costs(eight) == [4, 3]


def test_replicas_stop_once_the_slo_is_surely_missed() -> None:
    """A 1 ms TTFT limit at P50 over 1 s steps: every request misses it, so the run stops once more
    than half of them have their first token, long before the 20-token decodes end."""
    from kvplan.perf.slo_watch import SloWatch
    from kvplan.results.slo import Slo

    reqs = workload()
    watch = SloWatch.of(Slo(ttft_ms=1.0, tpot_ms=None, percentile=50.0), 0.0, reqs)
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    traces, _ = simulate_routed(reqs, config, OneSecond(), 2, "round-robin", watch=watch)
    assert any(t.extras["missed_slo"] for t in traces)
    assert max(float(t.last_token_s.max()) for t in traces) < 20.0


def _sent_and_first(traces) -> list[tuple[float, float]]:
    return sorted((float(s), float(f)) for t in traces for s, f in zip(t.send_s, t.first_token_s))


def test_an_idle_replica_takes_each_arrival_when_it_comes() -> None:
    """Round-robin over two replicas, 1 s steps, one token out each: A (t=0) r0, B (0.5) r1, C (2.5)
    r0, D (2.6) r1. Each replica is idle when its request arrives, so each first token comes one
    step after its send: no replica runs ahead of an arrival it has not been given yet."""
    reqs = [Request.of_ids(range(10 * i + 10, 10 * i + 18), 1, t, index=i) for i, t in enumerate((0.0, 0.5, 2.5, 2.6))]
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    traces, shares = simulate_routed(reqs, config, OneSecond(), 2, "round-robin")
    assert [s["requests"] for s in shares] == [2, 2]
    assert _sent_and_first(traces) == [(0.0, 1.0), (0.5, 1.5), (2.5, 3.5), (2.6, 3.6)]


def test_a_request_due_mid_step_is_timed_from_when_it_came_due() -> None:
    """Round-robin, 1 s steps: A and X (t=0, 3 out) take r0 and r1; B comes due at 0.5, during r0's
    first step. r0 takes it at 1 (first token at 2), but the client sent it at 0.5."""
    reqs = [Request.of_ids(range(10, 18), 3, 0.0, index=0), Request.of_ids(range(50, 58), 3, 0.0, index=1),
            Request.of_ids(range(100, 108), 1, 0.5, index=2)]
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    traces, _ = simulate_routed(reqs, config, OneSecond(), 2, "round-robin")
    assert _sent_and_first(traces) == [(0.0, 1.0), (0.0, 1.0), (0.5, 2.0)]


def test_a_request_due_as_the_slot_holder_steps_waits_for_the_slot() -> None:
    """--max-concurrency 1: A (t=0, 2 out) holds the only slot until 2; B comes due at exactly 1.0,
    between A's steps, finds the slot taken, and is sent (its clock started) at 2."""
    reqs = [Request.of_ids(range(10, 18), 2, 0.0, index=0), Request.of_ids(range(100, 108), 1, 1.0, index=1)]
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    traces, _ = simulate_routed(reqs, config, OneSecond(), 2, "round-robin", max_concurrency=1)
    assert _sent_and_first(traces) == [(0.0, 1.0), (2.0, 3.0)]


def test_a_released_turn_and_a_later_arrival_start_when_they_come_due() -> None:
    """Least-loaded, 1 s steps. A0 (t=0, 1 out) r0, X (t=0, 30 out) r1; A0 ends at 1 and its next
    turn is due 5 s later, so r0 idles; B (t=2) goes to r0 (nothing in flight there) and is
    computed from 2 (first token at 3); A1 comes due at 6 and goes back to r0 (least loaded)."""
    new = b"".join(t.to_bytes(4, "little") for t in (40, 41))
    reqs = [Request.of_ids(range(10, 18), 1, 0.0, session_id="a", index=0),
            Request(None, 11, 1, session_id="a", turn_index=1, think_s=5.0, index=1, turn_ids=new),
            Request.of_ids(range(100, 108), 30, 0.0, index=2),
            Request.of_ids(range(200, 208), 1, 2.0, index=3)]
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_num_seqs=8, max_num_batched_tokens=2048)
    traces, shares = simulate_routed(reqs, config, OneSecond(), 2, "least-loaded")
    assert [s["requests"] for s in shares] == [3, 1]
    assert (2.0, 3.0) in _sent_and_first(traces)
    assert (6.0, 7.0) in _sent_and_first(traces)  # A1: A0's end + its think time, then one step
