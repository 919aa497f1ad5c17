"""`kvplan stress` end to end on the bundled engine (CPU, tiny model)."""
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.results.result import load_result
from kvplan.stress.scenario_loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def _cli(capsys, *args):
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    with pytest.raises(SystemExit) as info:
        main(
            [
                "stress",
                "--scenario",
                str(ROOT / "scenarios/ci-smoke.yaml"),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
    assert info.value.code == 0
    return out


def test_ci_smoke_writes_a_valid_result(smoke):
    result = load_result(smoke / "result.json")
    assert result.complete and result.scenario_name == "ci-smoke"
    scenario = load_scenario(ROOT / "scenarios/ci-smoke.yaml")
    measured = [r for r in result.records() if not r.is_warmup]
    assert len(result.records()) == scenario.num_requests
    assert all(r.status == "ok" for r in measured)
    assert result.metrics["completed"] == scenario.num_requests - scenario.warmup_requests
    assert (smoke / "report.html").exists()
    # the machine's speed was measured against the bundled calibration, step by step
    assert (
        result.metrics["machine_speed_ratio"] > 0
        and result.metrics["machine_speed_p10"] <= result.metrics["machine_speed_p90"]
    )
    assert set(result.normalized_error_pct) >= {"median_ttft_ms", "median_itl_ms", "output_throughput"}


def test_ci_smoke_memory_matches_prediction(smoke):
    """Closed loop: the simulation runs the engine's scheduler on the same token counts, so the
    pool, the peak and the preemptions must agree exactly (stricter than the 2% the gate allows)."""
    r = load_result(smoke / "result.json")
    for key in ("num_gpu_blocks", "kv_pool_bytes", "peak_kv_bytes", "peak_running_requests", "num_preemptions"):
        assert r.prediction[key] == r.metrics[key], key
    assert r.metrics["num_gpu_blocks"] == 4 * 2**20 // r.metrics["bytes_per_block"]


def test_requests_match_their_specs(smoke):
    r = load_result(smoke / "result.json")
    for rec in r.records():
        assert rec.output_tokens == len(rec.token_times_s)
        assert rec.first_token_s >= rec.arrival_s
        assert rec.finish_s >= rec.first_token_s


def test_interrupt_writes_partial_result(tmp_path, monkeypatch):
    """Ctrl-C during the run: the partial result and its report are written, marked incomplete, open
    requests aborted, and the command exits 130 (an interrupted run is not a success)."""
    import kvplan.stress.targets.engine_target as runner  # where the engine target calls run_engine

    original = runner.run_engine

    def interrupted(engine, scenario, requests, on_progress=None, **kw):
        def progress(n):
            if n >= 3:
                raise KeyboardInterrupt
        return original(engine, scenario, requests, on_progress=progress, **kw)

    monkeypatch.setattr(runner, "run_engine", interrupted)
    with pytest.raises(SystemExit) as info:
        main(
            [
                "stress",
                "--scenario",
                str(ROOT / "scenarios/ci-smoke.yaml"),
                "--out",
                str(tmp_path),
                "--no-progress",
            ]
        )
    assert info.value.code == 130
    result = load_result(tmp_path / "result.json")
    assert not result.complete and (tmp_path / "report.html").exists()
    statuses = {r.status for r in result.records()}
    assert "aborted" in statuses and "ok" in statuses


@pytest.mark.slow
def test_paged_vs_contiguous_onset_of_preemption_matches(tmp_path):
    """A reduced paged-vs-contiguous scenario (same pool, fewer requests): the step at which
    preemption starts and the number of preemptions are predicted exactly."""
    from kvplan.stress.stress_run import StressOptions, run_stress, save_run

    data = load_scenario(ROOT / "scenarios/paged-vs-contiguous.yaml").to_dict()
    data["num_requests"] = 16
    data["arrival"]["concurrency"] = 12
    data["workload"]["classes"][0]["output_tokens"] = {"dist": "uniform", "min": 150, "max": 250}
    path = tmp_path / "pvc.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    save_run(run_stress(StressOptions(path, tmp_path / "out", allocator="both", progress=False)))
    paged = load_result(tmp_path / "out/result-paged.json")
    contiguous = load_result(tmp_path / "out/result-contiguous.json")
    assert paged.metrics["num_preemptions"] > 0
    # each result's settings name the allocator it ran, not the scenario's default
    assert (paged.scenario["engine"]["allocator"], contiguous.scenario["engine"]["allocator"]) == (
        "paged",
        "contiguous",
    )
    for key in ("num_preemptions", "preemption_onset_step", "peak_kv_bytes", "peak_running_requests"):
        assert paged.prediction[key] == paged.metrics[key], key
    assert contiguous.metrics["num_preemptions"] == 0
    assert contiguous.metrics["peak_running_requests"] == contiguous.prediction["peak_running_requests"] == 256 // 64
    assert paged.metrics["peak_running_requests"] > contiguous.metrics["peak_running_requests"]


@pytest.mark.parametrize("args,needle", [
    (["stress", "--scenario", "nope.yaml"], "nope.yaml"),
    (["stress", "--scenario", "scenarios/ci-smoke.yaml", "--allocator", "buddy"], "buddy"),
])
def test_bad_stress_invocations(capsys, tmp_path, args, needle, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, out, err = _cli(capsys, *args, "--out", str(tmp_path / "o"))
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_progress_lines_in_a_log(tmp_path, capsys, monkeypatch) -> None:
    """Not a terminal (a CI log): plain progress lines instead of a bar that prints nothing."""
    import kvplan.stress.driver as driver

    monkeypatch.setattr(driver, "LOG_PROGRESS_EVERY_S", 0.0)
    from kvplan.cli import main

    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", "ci-smoke", "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert info.value.code == 0
    lines = [line for line in out.splitlines() if line.startswith("ci-smoke (paged): ")]
    total = len(load_scenario("ci-smoke").num_requests * [0])
    assert len(lines) >= 2 and lines[-1].startswith(f"ci-smoke (paged): {total}/{total} requests")
