"""The machine measured apart from the engine: reference kernel samples, CPU waits, the thread
choice, machine facts, and the latency figures normalized by them."""
from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.engine.threads import busy_elsewhere, choose_threads
from kvplan.results.machine_facts import MachineFacts, cpu_model
from kvplan.stress.cpu_cost import LinearCostModel
from kvplan.stress.machine_speed import ReferenceSampler, ReferenceTiming, reference_slowdown
from kvplan.stress.run_queue import RunQueueClock

METRICS = {"median_itl_ms": 10.0, "mean_tpot_ms": 12.0, "mean_ttft_ms": 50.0, "output_throughput": 500.0}


def test_normalized_latency_takes_out_cpu_waits_and_counts_in_reference_units() -> None:
    quiet = ReferenceTiming([1e-3] * 40, [1e-3] * 40, step_wall_s=2.0, step_wait_s=0.0).figures(METRICS)
    # a neighbour took the core half the time: wall latency doubled, the kernel's CPU time did not move
    busy = ReferenceTiming([1.5e-3] * 40, [1e-3] * 40, step_wall_s=4.0, step_wait_s=2.0).figures(
        {k: (v * 2 if k.endswith("_ms") else v / 2) for k, v in METRICS.items()})
    assert quiet["median_itl_ref"] == pytest.approx(10.0) and quiet["output_tokens_per_ref"] == pytest.approx(0.5)
    assert busy["cpu_wait_share"] == pytest.approx(0.5)
    for name in ("median_itl_ref", "mean_tpot_ref", "mean_ttft_ref", "output_tokens_per_ref"):
        assert busy[name] == pytest.approx(quiet[name])
    # a CPU half as fast: the kernel's CPU time doubles with the latency
    slow_cpu = ReferenceTiming([2e-3] * 40, [2e-3] * 40, 4.0, 0.0).figures({"median_itl_ms": 20.0})
    assert slow_cpu["median_itl_ref"] == pytest.approx(10.0)


def test_without_the_wait_share_the_kernel_wall_time_is_the_yardstick() -> None:
    out = ReferenceTiming([2e-3] * 10, [1e-3] * 10, 1.0, None).figures({"median_itl_ms": 20.0})
    assert out["cpu_wait_share"] is None and out["median_itl_ref"] == pytest.approx(10.0)
    assert ReferenceTiming([], []).figures(METRICS) == {}


def test_sampler_spends_about_its_share_of_step_time() -> None:
    sampler = ReferenceSampler(lambda: 1e-3, share=0.05)  # a 1 ms sample per 20 ms of steps
    for _ in range(100):
        sampler.after_step(0.010)
    assert len(sampler.times_s) == 50
    sampler.top_up(60)
    assert len(sampler.times_s) == len(sampler.cpu_s) == 60


def test_reference_slowdown_against_the_calibration() -> None:
    cal = LinearCostModel(1e-3, 0, 0, 0, 0, reference_kernel_cpu_ms=1.0, cpu_wait_share=0.3)  # fitted without its waits
    assert reference_slowdown(cal, {"reference_kernel_cpu_ms": 1.5, "cpu_wait_share": 0.5}) == pytest.approx(3.0)
    assert reference_slowdown(LinearCostModel(1e-3, 0, 0, 0, 0), {"reference_kernel_cpu_ms": 1.5}) is None


def test_run_queue_clock_reads_this_threads_wait_or_says_it_cannot(tmp_path: Path) -> None:
    clock = RunQueueClock()
    if clock.available:
        first = clock.wait_s()
        assert first is not None and first >= 0 and clock.wait_s() >= first
    clock.close()
    missing = RunQueueClock(tmp_path / "nope")
    assert not missing.available and missing.wait_s() is None


def test_threads_follow_the_flag_then_omp_then_free_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("kvplan.engine.threads.usable_cores", lambda: 4)
    stat.write_text("cpu 1 2 3\nprocs_running 3\nprocs_blocked 0\n")  # this reader + 2 others
    assert busy_elsewhere(stat, samples=2, gap_s=0.0) == pytest.approx(2.0)
    choice = choose_threads(None, stat)
    assert (choice.threads, choice.how) == (2, "free cores")
    stat.write_text("procs_running 9\n")  # more busy than cores: still one thread
    assert choose_threads(None, stat).threads == 1
    assert choose_threads(3, stat).threads == 3 and choose_threads(3, stat).how == "--threads"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert choose_threads(None, stat).how == "OMP_NUM_THREADS"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert choose_threads(None, tmp_path / "no-proc").threads == 4  # the OS does not say: every usable core


def test_machine_facts_name_what_differs(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Example CPU 9000\n")
    assert cpu_model(info) == "Example CPU 9000"
    here = MachineFacts("Example CPU 9000", 2, "2.13.0+cpu", "vm")
    assert here.differences({"cpu_model": "Example CPU 9000", "cores": 2, "torch": "2.13.0+cpu", "host": "other"}) == []
    diff = here.differences({"cpu_model": "Other CPU", "cores": 2, "torch": "2.4.0", "host": "vm"})
    assert len(diff) == 2 and "Other CPU" in diff[0] and "2.4.0" in diff[1]
    assert "does not record which machine" in here.differences(None)[0]
