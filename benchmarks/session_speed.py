"""Time `kvplan predict` on conversations (issue 45: 10,000 turns in <= 2 s) beside single-turn
requests of the same tokens, in one run on this machine, and print the ratio.

    .venv/bin/python benchmarks/session_speed.py
Case: Llama-3.1-8B on one H100 (roofline step cost), 2,500 sessions of 4 turns (a 1,000-token
shared prefix, 256-token first message, 128-token messages and replies, 2 s think time) starting at
5 sessions/s, so 10,000 turns; then 10,000 single requests with each turn's prompt and reply
lengths at the same rate (20 req/s). Then the same conversations with an 8 GiB CPU tier, and
behind 4 replicas with the KV-aware router. In-process: the time excludes Python's start-up and
imports (`benchmarks/cli_startup.py` times those).

Then `plan-sessions` (issue 45: a 10,000-session agent workload in <= 5 s on 2 cores): 10,000
sessions of 4 turns (a 2,000-token shared tool prefix, 8 sessions/s, exponential 2 s think time),
H100 TP1, CPU tiers 0 and 16 GiB, the KV-aware router up to 8 replicas, P99 TTFT 2 s / TPOT 50 ms;
as shipped (a trial that misses stops once the miss is certain) beside every trial simulated to its
end (the search before early stopping), with the answers compared.
"""
from __future__ import annotations

import functools
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kvplan.perf import session_plan  # noqa: E402
from kvplan.perf.predict import predict  # noqa: E402
from kvplan.plan.engine_args import EngineArgs  # noqa: E402
from kvplan.results.slo import Slo  # noqa: E402
from kvplan.spec.gpu import load_gpu  # noqa: E402
from kvplan.spec.profiles import load_model  # noqa: E402
from kvplan.workload.datasets.random_dataset import RandomDataset  # noqa: E402
from kvplan.workload.request import Request  # noqa: E402
from kvplan.workload.sessions import Sessions  # noqa: E402

REPEATS = 3


def best_of(fn) -> tuple[float, object]:
    times, out = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs.from_flags(gpu=load_gpu("h100"))
    sessions = Sessions(num_sessions=2500, turns=4, shared_prefix_tokens=1000, first_turn_tokens=256, turn_tokens=128,
                        output_tokens=128, think_time_s=2.0, session_rate_per_s=5.0)
    turns = sessions.requests(0, spec.vocab_size)
    arrivals = RandomDataset(1, 1, 0.0, len(turns), 20.0).requests()
    single = [Request(a.arrival_s, t.prompt_tokens, t.output_tokens, index=i)
              for i, (a, t) in enumerate(zip(arrivals, turns))]
    cases = (
        ("10,000 turns (2,500 sessions x 4)", lambda: predict(spec, args, turns, perf_model="roofline")),
        ("10,000 single requests, same tokens", lambda: predict(spec, args, single, perf_model="roofline")),
        ("10,000 turns, 8 GiB CPU tier", lambda: predict(spec, args, turns, perf_model="roofline",
                                                         kv_offloading_size_gib=8.0)),
        ("10,000 turns, 4 replicas, KV-aware router", lambda: predict(spec, args, turns, perf_model="roofline",
                                                                      replicas=4, router="prefix")),
    )
    results = []
    for name, fn in cases:
        seconds, prediction = best_of(fn)
        figures = prediction.figures  # type: ignore[attr-defined]
        results.append(seconds)
        print(f"{name:45s} {seconds:6.2f} s   (predicted median TTFT {figures['median_ttft_ms']:.0f} ms, "
              f"prefix hit rate {figures.get('prefix_cache_hit_rate', 0.0):.0%})")
    print(f"conversations / single-turn: {results[0] / results[1]:.2f}x (best of {REPEATS} each); goal: "
          f"10,000 turns <= 2 s: {'met' if results[0] <= 2.0 else 'not met'} here")
    plan_sessions_speed(spec, args)


def plan_sessions_speed(spec, args) -> None:
    agents = Sessions(num_sessions=10_000, turns=4, shared_prefix_tokens=2000, first_turn_tokens=256, turn_tokens=128,
                      output_tokens=128, think_time_s=2.0, think_distribution="exponential",
                      session_rate_per_s=8.0).requests(0, spec.vocab_size)
    slo = Slo(ttft_ms=2000.0, tpot_ms=50.0, percentile=99.0)

    def plan():
        return session_plan.plan_sessions(spec, args, agents, slo, [args.gpu], [1], [0.0, 16.0], "prefix", 8, {})

    shipped_trial = session_plan._trial
    times = {}
    answers = {}
    for name, may_stop in (("as shipped (misses stop early)", True), ("every trial to its end", False)):
        session_plan._trial = shipped_trial if may_stop else functools.partial(shipped_trial, may_stop=False)
        start = time.perf_counter()
        answers[name] = plan()
        times[name] = time.perf_counter() - start
        session_plan._trial = shipped_trial
        best = answers[name]["best"]
        print(f"plan-sessions, 10,000 sessions, {name:32s} {times[name]:6.2f} s   ({len(answers[name]['trials'])} "
              f"trials; answer {best and (best['replicas'], best['tier_gib'])})")
    shipped, whole = times.values()
    same = [answers[n]["best"] and (answers[n]["best"]["replicas"], answers[n]["best"]["tier_gib"]) for n in answers]
    print(f"early stopping: {whole / shipped:.2f}x faster, same answer: {same[0] == same[1]}; goal <= 5 s: "
          f"{'met' if shipped <= 5.0 else 'not met'} here")


if __name__ == "__main__":
    main()
