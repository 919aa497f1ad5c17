"""The scheduler simulation against hand-counted steps, and the re-timing the fit relies on."""
from __future__ import annotations

import heapq
import math
from dataclasses import replace

import numpy as np
import pytest

from kvplan.perf.bench_metrics import Timings, bench_figures
from kvplan.perf.request_state import RequestState
from kvplan.perf.schedule import Engine, simulate
from kvplan.perf.scheduler_config import SchedulerConfig
from kvplan.perf.step_cost import StepShape
from kvplan.workload.datasets.random_dataset import RandomDataset
from kvplan.workload.prefix_cache import with_hit_rate
from kvplan.workload.request import Request


class _Unit:
    """Every step one second."""

    def step_s(self, shape: StepShape) -> float:
        return 1.0


class _ByTokens:
    def step_s(self, shape: StepShape) -> float:
        return 0.001 + 0.0001 * shape.num_tokens + 0.00002 * shape.num_seqs


unit, by_tokens = _Unit(), _ByTokens()


def test_chunked_prefill_hand_counted() -> None:
    # 32-token prompt, budget 16 tokens/step: two prefill chunks (the second samples token 1), then 2 decodes
    cfg = SchedulerConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=16)
    t = simulate([Request(0.0, 32, 3)], cfg, unit)
    assert list(t.step_tokens) == [16, 16, 1, 1]
    assert t.first_token_s[0] == 2.0 and t.last_token_s[0] == 4.0
    assert list(t.itl_s) == [1.0, 1.0]
    assert t.peak_used_blocks == 3  # 32 prompt + 2 generated tokens cached -> ceil(34 / 16)


def test_v0_prefill_first_stalls_decodes() -> None:
    # V0 without chunked prefill: the second request's prompt runs as its own step, the first decodes wait
    cfg = SchedulerConfig(100, 16, 8, 64, chunked_prefill=False)
    t = simulate([Request(0.0, 10, 3), Request(1.5, 10, 1)], cfg, unit)
    # step 1 prefill A (t=1), step 2 decode A (t=2, B arrived at 1.5), step 3 prefill B alone, step 4 decode A
    assert list(t.step_seqs) == [1, 1, 1, 1]
    assert t.first_token_s[1] == 3.0 and t.last_token_s[0] == 4.0


def test_small_pool_preempts_and_never_overfills() -> None:
    cfg = SchedulerConfig(num_gpu_blocks=12, block_size=16, max_num_seqs=16, max_num_batched_tokens=512)
    t = simulate([Request(0.0, 40, 60) for _ in range(4)], cfg, unit)
    assert t.num_preemptions > 0
    assert t.peak_used_blocks <= 12
    assert (t.last_step >= t.first_step).all() and len(t.first_step) == 4


def test_async_scheduling_holds_a_request_that_reaches_a_busy_engine_one_step() -> None:
    """vLLM >= 0.14 schedules step N+1 while step N runs, so a request arriving during step N first
    runs in step N+2. Unit steps: A prefills in step 1 and decodes on; B arrives at 1.5, during step 2."""
    sync = SchedulerConfig(100, 16, 8, 64)
    lagged = replace(sync, async_scheduling=True)
    reqs = [Request(0.0, 10, 6), Request(1.5, 10, 2)]
    assert simulate(reqs, sync, unit).first_token_s[1] == 3.0  # B's prefill is step 3
    assert simulate(reqs, lagged, unit).first_token_s[1] == 4.0  # step 3 was scheduled without it
    assert simulate(reqs, lagged, unit).last_token_s[0] == simulate(reqs, sync, unit).last_token_s[0]
    # an idle engine has no step in flight: it takes the request at once
    apart = [Request(0.0, 10, 2), Request(5.0, 10, 2)]
    assert simulate(apart, lagged, unit).first_token_s.tolist() == simulate(apart, sync, unit).first_token_s.tolist()


def test_max_concurrency_one_serializes_requests() -> None:
    cfg = SchedulerConfig(100, 16, 8, 256)
    t = simulate([Request(0.0, 20, 5) for _ in range(3)], cfg, by_tokens, max_concurrency=1)
    assert t.send_s[1] == pytest.approx(t.last_token_s[0]) and t.send_s[2] == pytest.approx(t.last_token_s[1])
    assert t.max_running == 1


def test_prefix_hits_skip_prefill_tokens() -> None:
    cfg = SchedulerConfig(100, 16, 8, 1024)
    cold = simulate([Request(0.0, 100, 2)], cfg, unit)
    warm = simulate(with_hit_rate([Request(0.0, 100, 2)], 0.5, 16), cfg, unit)
    assert cold.step_tokens[0] == 100 and warm.step_tokens[0] == 100 - 48  # 50 tokens -> 3 whole blocks


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("concurrency", [None, 3])
def test_retimed_trace_equals_simulated_clock(concurrency: int | None, async_scheduling: bool) -> None:
    """Without timed arrivals the step sequence does not depend on step durations: re-timing a
    trace recorded with unit steps gives exactly the clock of a simulation with the real costs."""
    reqs = RandomDataset(300, 40, 0.5, 30, math.inf, seed=3).requests()
    cfg = SchedulerConfig(60, 16, 8, 256, async_scheduling=async_scheduling)
    shape = simulate(reqs, cfg, unit, max_concurrency=concurrency)
    real = simulate(reqs, cfg, by_tokens, max_concurrency=concurrency)
    durations = np.array([by_tokens.step_s(StepShape(a, b, 0, 0)) for a, b in zip(shape.step_tokens, shape.step_seqs)])
    re = Timings.retimed(shape, durations)
    assert np.allclose(re.first_s, real.first_token_s) and np.allclose(re.last_s, real.last_token_s)
    assert np.allclose(re.send_s, real.send_s)


def test_bench_figures_keys_and_definitions() -> None:
    cfg = SchedulerConfig(100, 16, 8, 64)
    t = simulate([Request(0.0, 32, 3), Request(0.0, 16, 1)], cfg, unit)
    f = bench_figures(t)
    assert f["completed"] == 2 and f["total_output_tokens"] == 4
    assert f["mean_tpot_ms"] == pytest.approx(1000.0)  # one-token requests have no TPOT
    assert f["output_throughput"] == pytest.approx(4 / f["duration"])


@pytest.mark.parametrize(("workload", "config", "concurrency"), [
    (RandomDataset(300, 60, 0.5, 200, 5.0, seed=1), SchedulerConfig(400, 16, 32, 512), None),
    (RandomDataset(300, 60, 0.5, 200, math.inf, seed=2), SchedulerConfig(200, 16, 32, 512), None),  # preempts
    (RandomDataset(100, 300, 0.9, 100, 2.0, burstiness=0.3, seed=3), SchedulerConfig(5000, 16, 8, 256), 3),
    (RandomDataset(100, 50, 0.0, 50, 1.0, seed=3), SchedulerConfig(5000, 16, 8, 256, chunked_prefill=False), None),
    # a queue held by the pool (and, below, by the seat limit) while requests keep arriving
    (RandomDataset(200, 300, 0.5, 200, 40.0, seed=4), SchedulerConfig(150, 16, 64, 512), None),
    (RandomDataset(100, 200, 0.5, 200, 40.0, seed=5), SchedulerConfig(5000, 16, 4, 512), 50),
    # async scheduling (vLLM >= 0.14): arrivals at a busy engine sit out one step
    (RandomDataset(300, 60, 0.5, 200, 5.0, seed=1), SchedulerConfig(400, 16, 32, 512, async_scheduling=True), None),
    (RandomDataset(200, 300, 0.5, 200, 40.0, seed=4), SchedulerConfig(150, 16, 64, 512, async_scheduling=True), None),
    (RandomDataset(100, 200, 0.5, 200, math.inf, seed=5), SchedulerConfig(5000, 16, 4, 512, async_scheduling=True), 8),
])
def test_fast_decode_stretches_change_nothing(
    workload: RandomDataset, config: SchedulerConfig, concurrency: int | None
) -> None:
    """Pure-decode stretches run without the per-request loop: every recorded figure is identical."""
    reqs = workload.requests()
    slow = simulate(reqs, config, by_tokens, concurrency, fast=False, frontend_s=0.002)
    fast = simulate(reqs, config, by_tokens, concurrency, frontend_s=0.002)
    for name in ("step_tokens", "step_seqs", "step_prefill_tokens", "step_context_tokens", "step_attention_pairs",
                 "step_sampled", "step_end_s", "send_s", "send_step", "first_step", "last_step", "first_token_s",
                 "last_token_s", "itl_s"):
        assert np.array_equal(getattr(slow, name), getattr(fast, name)), name
    assert fast.extras["fast_decode_steps"] > 0 and slow.extras["fast_decode_steps"] == 0
    assert (slow.peak_used_blocks, slow.max_running, slow.num_preemptions) == (fast.peak_used_blocks, fast.max_running,
                                                                               fast.num_preemptions)


@pytest.mark.parametrize(("model", "rate"), [("llama-3.1-8b-instruct", 20.0), ("qwen3-30b-a3b", math.inf)])
def test_fast_decode_with_the_gpu_cost_model_is_bit_identical(model: str, rate: float) -> None:
    """The fast path times a whole decode stretch with one vectorized call of the GPU cost model
    and a sequential cumsum of the clock: the same floats as stepping one at a time."""
    from kvplan.perf.cost_models import step_cost
    from kvplan.perf.predict import scheduler_config, server_plan
    from kvplan.plan.engine_args import EngineArgs
    from kvplan.spec.gpu import load_gpu
    from kvplan.spec.profiles import load_model

    spec, args = load_model(model), EngineArgs(gpu=load_gpu("h100"), vllm_version="0.11.0")
    config, cost = scheduler_config(server_plan(spec, args)), step_cost(spec, args)
    reqs = RandomDataset(500, 120, 0.5, 120, rate, seed=5).requests()
    slow = simulate(reqs, config, cost, fast=False)
    fast = simulate(reqs, config, cost)
    for name in ("step_context_tokens", "step_end_s", "first_token_s", "last_token_s", "itl_s"):
        assert np.array_equal(getattr(slow, name), getattr(fast, name)), name
    assert fast.extras["fast_decode_steps"] > 0


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("rate", [5.0, math.inf])
def test_unrecorded_run_gives_the_same_request_times(fast: bool, rate: float) -> None:
    """Search probes skip the per-step columns and ITL samples (`record=False`): each request's
    send, first- and last-token times and the pool figures are those of a recorded run, and a
    stretch that ends in finishes (the fast path's last step) frees the same blocks."""
    workload = RandomDataset(300, 60, 0.5, 200, rate, seed=2)
    config = SchedulerConfig(200, 16, 32, 512)  # small pool: all at once preempts
    reqs = workload.requests()
    full = simulate(reqs, config, by_tokens, fast=fast)
    bare = simulate(reqs, config, by_tokens, fast=fast, record=False)
    for name in ("send_s", "send_step", "first_step", "last_step", "first_token_s", "last_token_s"):
        assert np.array_equal(getattr(full, name), getattr(bare, name)), name
    assert (full.peak_used_blocks, full.max_running, full.num_preemptions) == (bare.peak_used_blocks, bare.max_running,
                                                                               bare.num_preemptions)
    assert (full.num_preemptions > 0) == math.isinf(rate) and len(full.itl_s) and len(full.step_end_s)
    assert not len(bare.itl_s) and not len(bare.step_end_s)


class _TenMs:
    def step_s(self, shape) -> float:
        return 0.01

    def components_s(self, shape) -> dict[str, float]:
        return {"step": 0.01}


@pytest.mark.parametrize("prefix_caching, recompute", [(True, 9), (False, 13)])
def test_a_preempted_request_recomputes_only_what_was_evicted(prefix_caching: bool, recompute: int) -> None:
    """vLLM V1 (v1/core/sched/scheduler.py _preempt_request -> kv_cache_manager.free; block_pool.py
    free_blocks appends to the free queue's tail, a request's blocks last-first, and eviction takes
    the head): a preempted request's full blocks keep their hashes until evicted. By hand, blocks of
    4 tokens, a pool of 6: A and B (8-token prompts, 10 tokens out) prefill together (4 blocks),
    take a 5th and 6th block at step 1; at step 5 A needs a 4th block with none free, so B (13
    tokens known, 3 full blocks) is preempted and A takes B's last block; at step 9 A takes another
    (B's 2nd). A finishes; at step 10 B finds its first block (4 tokens) and recomputes 9 tokens,
    13 without prefix caching."""
    config = SchedulerConfig(num_gpu_blocks=6, block_size=4, max_num_seqs=8, max_num_batched_tokens=64,
                             prefix_caching=prefix_caching)
    t = simulate([Request(0.0, 8, 10), Request(0.0, 8, 10)], config, _TenMs(), fast=False)
    assert t.num_preemptions == 1
    assert [int(x) for x in t.step_prefill_tokens] == [16] + [0] * 9 + [recompute] + [0] * 4


# --- V0 without chunked prefill, by hand (vLLM 0.x scheduler._schedule_prefills) --------------------
def _v0(num_gpu_blocks: int = 100, max_num_seqs: int = 8, mnbt: int = 64) -> SchedulerConfig:
    return SchedulerConfig(num_gpu_blocks, 16, max_num_seqs, mnbt, chunked_prefill=False)


def test_v0_fills_a_prefill_step_up_to_the_token_budget() -> None:
    """Budget 64: prompts of 10, 10 and 44 fill it exactly and prefill together; 10, 10 and 45 do
    not, so the third prefills alone next step while the first two wait to decode."""
    exact = simulate([Request(0.0, 10, 2), Request(0.0, 10, 2), Request(0.0, 44, 2)], _v0(), unit)
    assert list(exact.step_tokens) == [64, 3] and list(exact.step_seqs) == [3, 3]
    over = simulate([Request(0.0, 10, 2), Request(0.0, 10, 2), Request(0.0, 45, 2)], _v0(), unit)
    assert list(over.step_tokens) == [20, 45, 3] and list(over.step_prefill_tokens) == [20, 45, 0]


def test_v0_admits_at_most_max_num_seqs() -> None:
    """Two sequences at most: A and B prefill (20 tokens), decode their last token, then C."""
    t = simulate([Request(0.0, 10, 2), Request(0.0, 10, 2), Request(0.0, 10, 2)], _v0(max_num_seqs=2), unit)
    assert list(t.step_tokens) == [20, 2, 10, 1]


def test_v0_keeps_its_watermark_of_free_blocks() -> None:
    """100 blocks: V0 keeps 1% (1 block) free at admission; a 99-block prompt (1,584 tokens) leaves
    exactly that and is admitted, and uses 99 blocks."""
    t = simulate([Request(0.0, 99 * 16, 1)], _v0(mnbt=2048), unit)
    assert list(t.step_tokens) == [1584] and t.peak_used_blocks == 99


def test_v0_refuses_a_prompt_that_would_eat_its_watermark() -> None:
    """One token more (1,585: 100 blocks) would leave 0 of the 1 block V0 keeps free: never admitted.
    V1 keeps no watermark (chunked prefill): the same prompt runs in all 100 blocks."""
    with pytest.raises(RuntimeError, match="needs more KV blocks than the pool holds"):
        simulate([Request(0.0, 99 * 16 + 1, 1)], _v0(mnbt=2048), unit)
    v1 = simulate([Request(0.0, 99 * 16 + 1, 1)], SchedulerConfig(100, 16, 8, 2048), unit)
    assert v1.peak_used_blocks == 100


def test_v0_runs_a_prefill_step_without_the_running_decodes() -> None:
    """Budget 100, unit steps. A (10 tokens, 3 out) prefills in step 1; B and C (60 each) arrive at
    0.5: step 2 prefills B alone (C would pass the budget) and A does not decode; step 3 C; A
    decodes in steps 4 and 5 (a mixed step would have decoded it in step 2)."""
    t = simulate([Request(0.0, 10, 3), Request(0.5, 60, 1), Request(0.5, 60, 1)], _v0(mnbt=100), unit)
    assert list(t.step_tokens) == [10, 60, 60, 1, 1]
    assert t.last_token_s[0] == 5.0


def test_a_preempted_request_s_block_is_evicted_once_the_free_ones_ahead_are_used() -> None:
    """The case below with prefix caching and A 14 tokens out: A takes blocks at steps 6, 10 and 14
    (13, 17, 21 tokens) from the free queue's head: the 2 that were free when B was preempted, then
    B's cached block. A ends at step 14; B finds nothing and computes its 16 tokens again from
    step 15 (12 + 4), then decodes its last token."""
    config = SchedulerConfig(num_gpu_blocks=6, block_size=4, max_num_seqs=8, max_num_batched_tokens=12)
    t = simulate([Request(0.0, 8, 14), Request(0.0, 16, 2)], config, _TenMs(), fast=False)
    assert t.num_preemptions == 1
    assert [int(x) for x in t.step_prefill_tokens] == [12] + [0] * 13 + [12, 4, 0]


@pytest.mark.parametrize("prefix_caching, preemptions, prefill_tokens", [
    (True, 1, [12] + [0] * 9 + [12, 0]),
    (False, 3, [12, 0, 11, 0, 11, 0, 0, 0, 0, 0, 12, 4, 0]),
])
def test_a_request_preempted_mid_prefill_keeps_its_full_block_behind_the_free_ones(
        prefix_caching: bool, preemptions: int, prefill_tokens: list[int]) -> None:
    """By hand, blocks of 4, a pool of 6, 12 tokens a step. Step 1: A (8 tokens, 10 out) prefills
    in 2 blocks, B (16 tokens, 2 out) its first 4 in 1. Step 2: A takes a 3rd block (2 free); B's
    next 11 tokens want 3: B, the newest, is preempted. With prefix caching the free queue is then
    the 2 blocks that were free, then B's full block; B would resume from it, but its 4 cached
    tokens + 11 want 4 blocks, its hit included (it leaves the free queue), of 3 free. A takes a
    block at step 6 (13 tokens) and at step 10 (17), from the head: the 2 free ones, never B's. A
    ends at step 10; at step 11 B finds its block and computes its last 12 tokens in one step.
    Without prefix caching B restarts from nothing: 11 tokens in 3 blocks fit at step 3, its last
    5 want a 4th at step 4 (preempted again), back at step 5, preempted at step 6 when A needs its
    4th block; after A ends, 12 + 4 tokens."""
    config = SchedulerConfig(num_gpu_blocks=6, block_size=4, max_num_seqs=8, max_num_batched_tokens=12,
                             prefix_caching=prefix_caching)
    t = simulate([Request(0.0, 8, 10), Request(0.0, 16, 2)], config, _TenMs(), fast=False)
    assert t.num_preemptions == preemptions
    assert [int(x) for x in t.step_prefill_tokens] == prefill_tokens
    assert list(t.step_tokens[:2]) == [12, 1]  # B left step 2 before it ran


# --- the client's queues and the free queue's runs, by hand ------------------------------------------
def _state(arrival_s: float, index: int) -> RequestState:
    return RequestState(Request(arrival_s, 16, 4, index=index))


def _engine(cap: int | None = None) -> Engine:
    return Engine([], SchedulerConfig(100, 16, 8, 64), unit, cap)


def test_a_released_turn_goes_before_an_earlier_scheduled_arrival() -> None:
    """`pop_due(by)`: a conversation's released turn (its user is waiting) before the earliest
    scheduled arrival when both are due; one due exactly at `by` is due; none due: None."""
    e = _engine()
    first, turn = _state(1.0, 0), _state(2.0, 1)
    e.pending.append(first)
    heapq.heappush(e.later, (2.0, 1, turn))
    assert e.pop_due(1.5) is first  # the turn is not due yet
    e.pending.appendleft(first)
    assert e.pop_due(2.0) is turn and e.pop_due(2.0) is first and e.pop_due(9.0) is None
    last = _state(4.0, 2)
    e.pending.append(last)
    assert e.pop_due(3.9) is None and e.pop_due(4.0) is last


def test_the_next_due_and_the_next_event() -> None:
    """`next_due_s`: the earlier of the next scheduled arrival and the next released turn.
    `next_event_s`: also the API server's next hand-over, but arrivals and turns only while a
    client slot is free; never past `horizon_s` (a router's next send)."""
    e = _engine(cap=1)
    assert e.next_due_s() == math.inf and e.next_event_s() == math.inf
    e.pending.append(_state(5.0, 0))
    heapq.heappush(e.later, (3.0, 1, _state(3.0, 1)))
    assert e.next_due_s() == 3.0 and e.next_event_s() == 3.0
    ready = _state(0.0, 2)
    ready.ready_s = 4.0
    e.frontend.append(ready)
    e.in_flight = 1  # the one slot taken: only the API server's hand-over is an event
    assert e.next_due_s() == 3.0 and e.next_event_s() == 4.0
    e.horizon_s = 3.5
    assert e.next_event_s() == 3.5


def test_taking_blocks_from_the_free_queue_evicts_runs_head_first() -> None:
    """Runs [3 free][A's 2 cached][4 free]: taking 4 uses the 3 free ones and one of A's (A keeps
    1 cached); taking 1 more evicts A's last, so nothing cached is left to track."""
    e = _engine()
    a = _state(0.0, 0)
    e.queue.extend([[None, 3], [a, 2], [None, 4]])
    e.cached_runs = 1
    e._evict(4)
    assert [list(run) for run in e.queue] == [[a, 1], [None, 4]] and e.cached_runs == 1
    e._evict(1)
    assert not e.queue and e.cached_runs == 0


# --- the client and the API server, by hand ----------------------------------------------------------
def test_the_api_server_hands_requests_over_one_at_a_time() -> None:
    """0.25 s of API server per request: three sent at 0 reach the engine at 0.25, 0.5 and 0.75;
    one sent at 5 (the server idle again) at 5.25. Without it a request is ready when sent."""
    reqs = [Request(0.0, 10, 1), Request(0.0, 10, 1), Request(0.0, 10, 1), Request(5.0, 10, 1)]
    served = simulate(reqs, SchedulerConfig(100, 16, 8, 64), unit, frontend_s=0.25)
    assert served.ready_s.tolist() == [0.25, 0.5, 0.75, 5.25] and served.send_s.tolist() == [0, 0, 0, 5]
    direct = simulate(reqs, SchedulerConfig(100, 16, 8, 64), unit)
    assert direct.ready_s.tolist() == [0.0, 0.0, 0.0, 5.0]


@pytest.mark.parametrize("fast", [True, False])
def test_a_request_due_when_every_slot_is_taken_is_sent_as_one_frees(fast: bool) -> None:
    """--max-concurrency 2, three requests at 0 (2 tokens out, unit steps): the third is sent at 2,
    when the first two end. --max-concurrency 1, B due at exactly 1.0 while A runs to 2: B waited
    for the slot, so its clock starts at 2 (vLLM's client starts it after the semaphore)."""
    cfg = SchedulerConfig(100, 16, 8, 64)
    three = simulate([Request(0.0, 10, 2)] * 3, cfg, unit, max_concurrency=2, fast=fast)
    assert three.send_s.tolist() == [0.0, 0.0, 2.0]
    two = simulate([Request(0.0, 10, 2), Request(1.0, 10, 1)], cfg, unit, max_concurrency=1, fast=fast)
    assert two.send_s.tolist() == [0.0, 2.0] and two.first_token_s[1] == 3.0


def test_a_request_due_mid_step_is_timed_from_when_it_came_due() -> None:
    """No concurrency limit: B comes due at 0.5, during A's first step; the engine takes it at 1,
    but the client sent it (and started its clock) at 0.5."""
    t = simulate([Request(0.0, 10, 3), Request(0.5, 10, 1)], SchedulerConfig(100, 16, 8, 64), unit)
    assert t.send_s.tolist() == [0.0, 0.5] and t.first_token_s[1] == 2.0


def test_turns_without_prefix_caching_are_refused() -> None:
    from kvplan.workload.sessions import Sessions

    turns = Sessions(num_sessions=1, turns=2, session_rate_per_s=None).requests(0, 1000)
    cfg = SchedulerConfig(100, 16, 8, 64, prefix_caching=False)
    with pytest.raises(ValueError, match="turns need prefix caching on and every prompt's token ids"):
        Engine(turns, cfg, unit, None)


def test_an_engine_records_its_steps_unless_told_not_to() -> None:
    """`Engine` records each step's shape by default (a 20-token prompt, 2 out: a prefill, a decode)."""
    from kvplan.perf.schedule import drive

    engine = drive(Engine([Request(0.0, 20, 2)], SchedulerConfig(100, 16, 8, 64), unit, None))
    assert list(engine.trace().step_tokens) == [20, 1] and engine.trace().itl_s.tolist() == [1.0]


# --- a step's shape and the trace's columns, by hand ------------------------------------------------
class _Recording:
    """Unit steps that keep every shape they were asked to time."""

    def __init__(self) -> None:
        self.shapes: list[StepShape] = []

    def step_s(self, shape: StepShape) -> float:
        self.shapes.append(shape)
        return 1.0


def test_step_shapes_count_causal_pairs_chunks_and_samples() -> None:
    """A (7 tokens) and B (5) prefill together: pairs 1+..+7 = 28 and 1+..+5 = 15, both sample;
    then two decodes attending to 8 and 6 tokens. C (20 tokens, budget 11) alone: an 11-token
    chunk (66 pairs, no sample), then 9 after 11 cached (12+..+20 = 144), which samples."""
    rec = _Recording()
    t = simulate([Request(0.0, 7, 2), Request(0.0, 5, 2)], SchedulerConfig(100, 16, 8, 64), rec)
    assert rec.shapes == [StepShape(12, 2, 12, 43, 12, 2, 2, 43), StepShape(2, 2, 14, 14, 0, 2, 0, 0)]
    assert t.step_context_tokens.tolist() == [12, 14] and t.step_attention_pairs.tolist() == [43, 14]
    assert t.step_sampled.tolist() == [2, 2] and t.start_step.tolist() == [0, 0]
    rec = _Recording()
    t = simulate([Request(0.0, 20, 1)], SchedulerConfig(100, 16, 8, 11), rec)
    assert rec.shapes == [StepShape(11, 1, 11, 66, 11, 0, 1, 66), StepShape(9, 1, 20, 144, 9, 1, 1, 144)]
    assert t.step_sampled.tolist() == [0, 1]


def test_the_trace_says_whether_its_steps_depend_on_the_clock() -> None:
    """All at 0 (a burst): the step sequence is the same whatever the step times, so a fit may
    re-time it; an arrival after 0, or an API server's serial time, ties it to the clock."""
    cfg = SchedulerConfig(100, 16, 8, 64)
    assert not simulate([Request(0.0, 10, 2)] * 2, cfg, unit).timed_arrivals
    assert simulate([Request(0.0, 10, 2), Request(0.5, 10, 2)], cfg, unit).timed_arrivals
    assert simulate([Request(0.0, 10, 2)] * 2, cfg, unit, frontend_s=0.001).timed_arrivals
    burst = simulate([Request(0.0, 10, 2)], cfg, unit)
    assert burst.extras["missed_slo"] is False and "prefix_cache" not in burst.extras
    ids = simulate([Request.of_ids(range(5, 37), 2, 0.0)], cfg, unit)  # token ids: the hashed pool
    assert ids.extras["prefix_cache"]["queries_tokens"] == 32


# --- stopping once the SLO is surely missed (perf/slo_watch), by hand --------------------------------
def _watched(slo_kwargs: dict) -> tuple:
    from kvplan.perf.slo_watch import SloWatch
    from kvplan.results.slo import Slo

    reqs = [Request(0.0, 10, 3) for _ in range(4)] + [Request(0.0, 10, 1)]
    watch = SloWatch.of(Slo(percentile=50, **slo_kwargs), 0.0, reqs)
    return simulate(reqs, SchedulerConfig(100, 16, 8, 64), unit, watch=watch), watch


def test_a_tpot_limit_surely_missed_stops_the_run() -> None:
    """Five requests at 0, unit steps: all prefill in step 1, the four of 3 tokens decode in steps 2
    and 3, so each has TPOT (3 - 1) / 2 = 1 s; the one-token request has none. P50 of four TPOTs may
    leave 2 above the limit (4 - floor(3 x 0.5) - 1): the third over 500 ms settles it, and the run
    stops at the end of that step (step 3, where all four end: 4 counted)."""
    trace, watch = _watched({"tpot_ms": 500})
    assert trace.extras["missed_slo"] is True and watch.tpot_over == 4 and len(trace.step_tokens) == 3
    met, watch = _watched({"tpot_ms": 1000})  # exactly at the limit is within it
    assert met.extras["missed_slo"] is False and watch.tpot_over == 0 and len(met.step_tokens) == 3


def test_a_ttft_limit_surely_missed_stops_after_the_first_step() -> None:
    """Every first token comes at 1 s; P50 of five may leave 2 above a 500 ms limit: the step that
    gives all five their first token settles it, and the run stops there, nothing decoded."""
    trace, watch = _watched({"ttft_ms": 500})
    assert trace.extras["missed_slo"] is True and watch.ttft_over == 5 and len(trace.step_tokens) == 1
