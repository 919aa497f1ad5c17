"""The whole gate on two hand-made results: which checks run (the scenario's gate block, flag
overrides, the defaults when the block names nothing), the health check, the contention excuse for
raw latency, and the pairs refused (kvplan/gate/checks.py's rules, worked by hand)."""
from __future__ import annotations

from typing import Any

import pytest

from kvplan.errors import KvplanError
from kvplan.gate.checks import (
    CONTENDED_REFERENCE,
    CONTENDED_WAIT_SHARE,
    GateCheck,
    check_comparable,
    contention,
    format_number,
    gate_plan,
    run_gate,
)
from kvplan.gate.gate_block import Gate
from kvplan.gate.tolerance import Tolerance
from kvplan.results.figures import default_gate
from kvplan.results.result import RunResult, collect_environment


def _result(metrics: dict[str, Any], gate: dict[str, Any] | None = None, *, name: str = "s", threads: int = 2,
            prediction: dict[str, Any] | None = None, complete: bool = True, allocator: str = "paged",
            seed: int = 0) -> RunResult:
    env = collect_environment()
    env.engine_threads = threads
    return RunResult(scenario={"name": name, "seed": seed, "gate": gate or {}}, environment=env, metrics=metrics,
                     prediction=prediction or {}, complete=complete, allocator=allocator)


def test_contention_names_each_cause_or_none() -> None:
    base = _result({"cpu_wait_share": 0.0, "reference_kernel_cpu_ms": 8.0})
    assert contention(base, _result({"cpu_wait_share": CONTENDED_WAIT_SHARE,
                                     "reference_kernel_cpu_ms": 8.0 * CONTENDED_REFERENCE})) is None  # at the limits
    busy = _result({"cpu_wait_share": 0.30, "reference_kernel_cpu_ms": 12.0})
    assert contention(base, busy) == ("machine contended: the engine waited for a CPU 30% of its step time "
                                      "(baseline 0%); the reference kernel took 1.50x the baseline's CPU time")
    assert contention(_result({}), _result({"cpu_wait_share": 0.2})) == (  # no baseline figure: 0
        "machine contended: the engine waited for a CPU 20% of its step time (baseline 0%)")


def test_the_plan_takes_the_block_then_the_flags() -> None:
    gate = Gate.model_validate({"exact": ["num_gpu_blocks", "peak_kv_bytes"], "relative": {"p99_ttft_ms": "+20%"},
                                "prediction": {"peak_kv_bytes": "1%"}})
    plan = gate_plan(gate, ["peak_kv_bytes=+5%", "p99_ttft_ms=exact"], ["peak_kv_bytes=2%", "mean_ttft_ms=30%"])
    assert plan.exact == ("num_gpu_blocks", "p99_ttft_ms") and plan.notes == ()
    assert plan.relative == {"peak_kv_bytes": Tolerance.model_validate("+5%")}
    assert plan.prediction == {"peak_kv_bytes": Tolerance.model_validate("2%"),
                               "mean_ttft_ms": Tolerance.model_validate("30%")}
    empty = gate_plan(Gate())
    exact, relative = default_gate()
    assert empty.exact == exact and empty.relative == {k: Tolerance.model_validate(v) for k, v in relative.items()}
    assert empty.notes == ("the scenario's gate block compares nothing with the baseline; using the default checks",)


def test_pairs_that_cannot_be_compared_are_refused_and_differences_said() -> None:
    base = _result({}, name="a")
    with pytest.raises(KvplanError, match="^r.json is scenario 'b' but b.json is 'a': gate a result against"):
        check_comparable(base, _result({}, name="b"), "b.json", "r.json")
    with pytest.raises(KvplanError, match="^r.json used the contiguous allocator but b.json the paged allocator"):
        check_comparable(base, _result({}, name="a", allocator="contiguous"), "b.json", "r.json")
    with pytest.raises(KvplanError, match="^r.json is incomplete"):
        check_comparable(base, _result({}, name="a", complete=False), "b.json", "r.json")
    with pytest.raises(KvplanError, match="^b.json is incomplete"):
        check_comparable(_result({}, name="a", complete=False), base, "b.json", "r.json")
    assert check_comparable(base, _result({}, name="a", gate={"exact": ["num_gpu_blocks"]})) == []  # the gate block
    notes = check_comparable(base, _result({}, name="a", seed=3, threads=4))
    assert notes == ["scenario settings differ from the baseline's: seed",
                     "the engine ran 4 intra-op threads, the baseline 2: normalized latency compares different "
                     "configurations (pin engine.num_threads or --threads)"]


def test_the_verdict_holds_every_check_in_order() -> None:
    gate = {"exact": ["num_gpu_blocks"], "relative": {"p99_ttft_ms": "+10%"}, "prediction": {"peak_kv_bytes": "5%"}}
    base = _result({"num_gpu_blocks": 100, "p99_ttft_ms": 100.0, "failed": 0}, gate)
    cur = _result({"num_gpu_blocks": 100, "p99_ttft_ms": 130.0, "failed": 1, "peak_kv_bytes": 1000},
                  gate, prediction={"peak_kv_bytes": 1040})
    verdict = run_gate(base, cur)
    assert verdict.checks == (
        GateCheck("num_gpu_blocks", 100, 100, 0, "exact", True, "exact"),
        GateCheck("p99_ttft_ms", 100.0, 130.0, 30.0, "+10%", False, "raw"),
        GateCheck("peak_kv_bytes", 1040, 1000, 40, "±5% of measured", True, "prediction"),
        GateCheck("failed", 0, 1, 1, "<= baseline", False, "health"),
    )
    assert (verdict.scenario, verdict.allocator, verdict.exit_code, verdict.notes) == ("s", "paged", 1, ())
    assert [c.metric for c in verdict.failures] == ["p99_ttft_ms", "failed"]
    gone = run_gate(base, _result({"num_gpu_blocks": 100, "p99_ttft_ms": 100.0}, gate))
    assert gone.checks[-1] == GateCheck("failed", 0, None, None, "<= baseline", False, "health",
                                        "missing from the result")


def test_a_contended_run_is_judged_on_its_normalized_latency() -> None:
    gate = {"relative": {"mean_ttft_ms": "+10%", "mean_ttft_ref": "+10%"}}
    base = _result({"mean_ttft_ms": 100.0, "mean_ttft_ref": 100.0, "cpu_wait_share": 0.0}, gate)
    cur = _result({"mean_ttft_ms": 200.0, "mean_ttft_ref": 105.0, "cpu_wait_share": 0.5}, gate)
    verdict = run_gate(base, cur)
    raw = next(c for c in verdict.checks if c.metric == "mean_ttft_ms")
    assert raw.passed and raw.note.startswith("beyond the limit, not failed: machine contended")
    assert verdict.passed and verdict.notes[-1] == ("machine contended: the engine waited for a CPU 50% of its step "
                                                    "time (baseline 0%): raw latency is shown, the normalized figures "
                                                    "decide")


def test_numbers_as_the_gate_writes_them() -> None:
    assert [format_number(v) for v in (None, 1234567, 2.0, 0.000123456789, 1234.56789)] == [
        "n/a", "1,234,567", "2.0", "0.000123457", "1,234.57"]
