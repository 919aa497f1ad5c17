"""`kvplan gate` and `kvplan baseline update`: verdicts, exit codes, JUnit XML, tolerances."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.errors import KvplanError
from kvplan.gate.baseline import update_baseline
from kvplan.gate.checks import GateCheck, run_gate
from kvplan.gate.junit import junit_xml
from kvplan.results.figures import figure_value as metric_value
from kvplan.results.result import RunResult


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _variant(result: RunResult, **metrics: float) -> RunResult:
    copy = result.model_copy(deep=True)
    copy.metrics.update(metrics)
    return copy


@pytest.fixture(scope="module")
def mixed(result_factory) -> RunResult:
    return result_factory(scenario_file="mixed.yaml", n_requests=60)  # p99_itl_ms: "+15%"


def test_result_passes_against_itself(smoke_result: RunResult) -> None:
    verdict = run_gate(smoke_result, smoke_result)
    assert verdict.passed and verdict.exit_code == 0
    kinds = {c.kind for c in verdict.checks}
    assert kinds == {"exact", "normalized", "raw", "prediction", "health"}
    exact = set(smoke_result.scenario["gate"]["exact"])
    assert {c.metric for c in verdict.checks if c.kind == "exact"} == exact
    assert {"num_gpu_blocks", "peak_kv_bytes", "num_preemptions", "num_steps", "mean_tokens_per_step"} <= exact


def test_p99_itl_inflated_by_half_fails(mixed: RunResult) -> None:
    worse = _variant(mixed, p99_itl_ms=mixed.metrics["p99_itl_ms"] * 1.5)
    verdict = run_gate(mixed, worse)
    assert not verdict.passed and verdict.exit_code == 1
    (fail,) = verdict.failures
    assert (fail.metric, fail.kind, fail.limit) == ("p99_itl_ms", "raw", "+15%")
    assert fail.delta_pct == pytest.approx(50.0)


def test_within_tolerance_and_improvements_pass(mixed: RunResult) -> None:
    better = _variant(mixed, p99_itl_ms=mixed.metrics["p99_itl_ms"] * 0.5,  # faster is never a regression
                      output_throughput=mixed.metrics["output_throughput"] * 0.85)  # -15% of "-20%"
    assert run_gate(mixed, better).passed
    slower = _variant(mixed, output_throughput=mixed.metrics["output_throughput"] * 0.7)
    assert [c.metric for c in run_gate(mixed, slower).failures] == ["output_throughput"]


def test_peak_kv_one_block_more_fails(smoke_result: RunResult) -> None:
    m = smoke_result.metrics
    worse = _variant(smoke_result, peak_kv_bytes=m["peak_kv_bytes"] + m["bytes_per_block"])
    failed = {(c.metric, c.kind) for c in run_gate(smoke_result, worse).failures}
    assert ("peak_kv_bytes", "exact") in failed


def test_prediction_tolerance(smoke_result: RunResult) -> None:
    off = smoke_result.model_copy(deep=True)
    off.prediction["peak_kv_bytes"] = int(smoke_result.metrics["peak_kv_bytes"] * 1.05)  # gate.prediction: "2%"
    verdict = run_gate(smoke_result, off)
    assert [(c.metric, c.kind) for c in verdict.failures] == [("peak_kv_bytes", "prediction")]
    assert verdict.failures[0].limit == "±2% of measured"
    # the prediction's error, signed as the stress table and the report's plot: (predicted - measured) / measured
    assert verdict.failures[0].delta_pct == pytest.approx(5.0, abs=0.1) and verdict.failures[0].delta > 0


def test_p50_in_gate_reads_the_median(mixed: RunResult) -> None:
    checks = {c.metric: c for c in run_gate(mixed, mixed).checks if c.kind == "prediction"}
    assert checks["median_ttft_ms"].baseline == pytest.approx(
        mixed.prediction["median_ttft_ms"]
    )  # one name: vLLM's median_
    assert metric_value({"median_itl_ms": 3.0}, "p50_itl_ms") == 3.0  # an older scenario's p50_ still reads the median
    older = mixed.model_copy(deep=True)
    older.scenario["gate"]["prediction"] = {"p50_ttft_ms": "15%"}
    checks = {c.metric: c for c in run_gate(older, older).checks if c.kind == "prediction"}
    assert checks["p50_ttft_ms"].baseline == pytest.approx(mixed.prediction["median_ttft_ms"])


def test_tolerance_flags_override_the_scenario(smoke_result: RunResult) -> None:
    worse = _variant(smoke_result, p99_itl_ms=smoke_result.metrics["p99_itl_ms"] * 1.5)
    assert run_gate(smoke_result, worse).passed  # ci-smoke allows +100% on a noisy CI box
    assert not run_gate(smoke_result, worse, tolerance=["p99_itl_ms=+15%"]).passed
    grown = _variant(smoke_result, peak_kv_bytes=smoke_result.metrics["peak_kv_bytes"] + 32768)
    assert run_gate(
        smoke_result, grown, tolerance=["peak_kv_bytes=+5%"], prediction_tolerance=["peak_kv_bytes=5%"]
    ).passed
    with pytest.raises(KvplanError, match="did you mean: p99_itl_ms"):
        run_gate(smoke_result, smoke_result, tolerance=["p99_itl_m=+5%"])
    with pytest.raises(KvplanError, match="not a tolerance"):
        run_gate(smoke_result, smoke_result, tolerance=["p99_itl_ms=lots"])
    with pytest.raises(KvplanError, match="symmetric"):
        run_gate(smoke_result, smoke_result, prediction_tolerance=["peak_kv_bytes=+5%"])


def test_missing_figures(smoke_result: RunResult) -> None:
    gone = smoke_result.model_copy(deep=True)
    del gone.metrics["peak_kv_bytes"]
    check = next(c for c in run_gate(smoke_result, gone).checks if c.metric == "peak_kv_bytes" and c.kind == "exact")
    assert not check.passed and "missing from the result" in check.note
    both = run_gate(gone, gone, tolerance=["peak_kv_bytes=exact"])
    assert next(c for c in both.checks if c.metric == "peak_kv_bytes" and c.kind == "exact").passed


def test_more_failed_requests_fail_the_health_check(smoke_result: RunResult) -> None:
    worse = _variant(smoke_result, failed=smoke_result.metrics["failed"] + 3)
    assert [(c.metric, c.kind) for c in run_gate(smoke_result, worse).failures] == [("failed", "health")]


def test_incomparable_results_are_bad_input(smoke_result: RunResult, result_factory) -> None:
    with pytest.raises(KvplanError, match="scenario 'mixed'"):
        run_gate(smoke_result, result_factory(scenario_file="mixed.yaml", n_requests=20))
    contiguous = smoke_result.model_copy(deep=True)
    contiguous.allocator = "contiguous"
    with pytest.raises(KvplanError, match="allocator"):
        run_gate(smoke_result, contiguous)
    partial = smoke_result.model_copy(deep=True)
    partial.complete = False
    with pytest.raises(KvplanError, match="incomplete"):
        run_gate(smoke_result, partial)


def test_changed_settings_are_noted(smoke_result: RunResult) -> None:
    changed = smoke_result.model_copy(deep=True)
    changed.scenario["engine"]["max_num_seqs"] = 4
    assert any("engine.max_num_seqs" in n for n in run_gate(smoke_result, changed).notes)


def test_junit_xml(smoke_result: RunResult) -> None:
    worse = _variant(smoke_result, num_preemptions=3)
    root = ET.fromstring(junit_xml(run_gate(smoke_result, worse)))
    assert root.tag == "testsuite" and root.get("failures") == "1"
    assert int(root.get("tests")) == len(root.findall("testcase"))
    (failed,) = [c for c in root.findall("testcase") if c.find("failure") is not None]
    assert failed.get("name") == "num_preemptions" and failed.get("classname").endswith(".exact")


def test_gate_check_is_frozen() -> None:
    check = GateCheck("x", 1.0, 2.0, 1.0, "+15%", False, "relative")
    with pytest.raises(AttributeError):
        check.passed = True  # type: ignore[misc]
    assert check.delta_pct == 100.0


# --- the command line -------------------------------------------------------------------------
def test_cli_exit_codes(tmp_path: Path, capsys, monkeypatch, mixed: RunResult) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    base = mixed.write_atomic(tmp_path / "base.json")
    rc, out, _ = cli(capsys, "gate", "--baseline", str(base), "--result", str(base), "--junit", str(tmp_path / "j.xml"),
                     "--html", str(tmp_path / "gate.html"))
    assert rc == 0 and "PASS" in out and "FAIL" not in out
    assert "p99_itl_ms" in out and "baseline / predicted" in out
    assert ET.parse(tmp_path / "j.xml").getroot().get("failures") == "0"
    assert "PASS" in (tmp_path / "gate.html").read_text()

    worse = _variant(mixed, p99_itl_ms=mixed.metrics["p99_itl_ms"] * 1.5).write_atomic(tmp_path / "worse.json")
    rc, out, _ = cli(capsys, "gate", "-b", str(base), "-r", str(worse), "--junit", str(tmp_path / "j.xml"))
    assert rc == 1 and "FAIL" in out and "+50.0%" in out
    assert ET.parse(tmp_path / "j.xml").getroot().get("failures") == "1"

    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "scenario": ')
    rc, _, err = cli(capsys, "gate", "-b", str(base), "-r", str(bad))
    assert rc == 2 and "not valid JSON" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli(capsys, "gate", "-b", str(tmp_path / "nope.json"), "-r", str(base))
    assert rc == 2 and "no such result file" in err


def test_cli_different_scenarios_exit_2(tmp_path: Path, capsys, smoke_result: RunResult, mixed: RunResult) -> None:
    a = smoke_result.write_atomic(tmp_path / "a.json")
    b = mixed.write_atomic(tmp_path / "b.json")
    rc, _, err = cli(capsys, "gate", "-b", str(a), "-r", str(b))
    assert rc == 2 and "scenario" in err


def test_baseline_update_and_default_baseline(tmp_path: Path, capsys, monkeypatch, smoke_result: RunResult) -> None:
    monkeypatch.chdir(tmp_path)
    src = smoke_result.write_atomic(tmp_path / "run" / "result.json")
    rc, _, err = cli(capsys, "baseline", "update", str(src))
    target = tmp_path / "reports" / "baselines" / "ci-smoke.json"
    assert rc == 0 and target.exists() and str(Path("reports/baselines/ci-smoke.json")) in err
    assert target.read_bytes() == src.read_bytes()  # a copy, byte for byte
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    rc, out, _ = cli(capsys, "gate", "-r", str(src))  # baseline defaults to reports/baselines/<scenario>.json
    assert rc == 0 and "PASS" in out
    update = update_baseline(src, tmp_path / "reports" / "baselines")
    assert update.replaced and update.previous_commit == smoke_result.environment.git_commit
    assert sorted(p.name for p in target.parent.iterdir()) == ["ci-smoke.json"]  # no temp files left


def test_baseline_refuses_bad_results(tmp_path: Path, smoke_result: RunResult) -> None:
    partial = smoke_result.model_copy(deep=True)
    partial.complete = False
    with pytest.raises(KvplanError, match="incomplete"):
        update_baseline(partial.write_atomic(tmp_path / "p.json"), tmp_path / "b")
    evil = smoke_result.model_copy(deep=True)
    evil.scenario["name"] = "../../etc/x"
    with pytest.raises(KvplanError, match="cannot be a file name"):
        update_baseline(evil.write_atomic(tmp_path / "e.json"), tmp_path / "b")
    (tmp_path / "m.json").write_text("[1, 2")
    with pytest.raises(KvplanError, match="not valid JSON"):
        update_baseline(tmp_path / "m.json", tmp_path / "b")
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())
    contiguous = smoke_result.model_copy(deep=True)
    contiguous.allocator = "contiguous"
    assert (
        update_baseline(contiguous.write_atomic(tmp_path / "c.json"), tmp_path / "b").path.name
        == "ci-smoke.contiguous.json"
    )


def test_baseline_update_refuses_a_result_that_fails_its_gate(tmp_path: Path, capsys, smoke_result: RunResult) -> None:
    baselines = tmp_path / "b"
    update_baseline(smoke_result.write_atomic(tmp_path / "good.json"), baselines)
    m = smoke_result.metrics
    worse = _variant(smoke_result, peak_kv_bytes=m["peak_kv_bytes"] + m["bytes_per_block"])  # exact check fails
    bad = worse.write_atomic(tmp_path / "bad.json")
    rc, _, err = cli(capsys, "baseline", "update", str(bad), "--dir", str(baselines))
    assert rc == 2 and "fails its gate" in err and "peak_kv_bytes" in err and "--force" in err
    assert (baselines / "ci-smoke.json").read_bytes() == (tmp_path / "good.json").read_bytes()  # untouched
    rc, _, _ = cli(capsys, "baseline", "update", str(bad), "--dir", str(baselines), "--force")
    assert rc == 0 and (baselines / "ci-smoke.json").read_bytes() == bad.read_bytes()
    # a first baseline is gated against its own prediction
    off = smoke_result.model_copy(deep=True)
    off.prediction["peak_kv_bytes"] = int(m["peak_kv_bytes"] * 1.05)  # outside gate.prediction's 2%
    with pytest.raises(KvplanError, match="own prediction"):
        update_baseline(off.write_atomic(tmp_path / "off.json"), tmp_path / "fresh")


def test_gate_and_report_commands_stay_light() -> None:
    """`kvplan --help` must not import matplotlib or jinja2 now that report/gate exist."""
    import subprocess
    import sys

    code = ("import sys\nfrom kvplan.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', [m for m in ('matplotlib', 'jinja2', 'pandas', 'torch') if m in sys.modules])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


def _timed(result: RunResult, *, slower: float = 1.0, wait_share: float = 0.0, ref_cpu_ms: float = 1.0,
           engine: float = 1.0) -> RunResult:
    """`result` as measured on a machine `slower` times slower in wall time (CPU waits of
    `wait_share`), with an engine `engine` times as slow per step; normalized figures as the runner
    computes them."""
    from kvplan.stress.machine_speed import ReferenceTiming

    copy = result.model_copy(deep=True)
    m = copy.metrics
    factor = slower * engine
    for k in ("median_itl_ms", "mean_tpot_ms", "mean_ttft_ms", "p99_itl_ms"):
        m[k] = result.metrics[k] * factor
    m["output_throughput"] = result.metrics["output_throughput"] / factor
    n = 40
    m.update(
        ReferenceTiming(
            [ref_cpu_ms / 1e3 / (1 - wait_share)] * n, [ref_cpu_ms / 1e3] * n, 10.0, 10.0 * wait_share
        ).figures(m)
    )
    return copy


def test_a_busy_machine_is_excused_on_raw_latency_but_a_slow_engine_is_not(smoke_result: RunResult) -> None:
    base = _timed(smoke_result)
    busy = _timed(smoke_result, slower=4.0, wait_share=0.75)  # a neighbour took 3/4 of the core
    verdict = run_gate(base, busy)
    assert verdict.passed
    raw = [c for c in verdict.checks if c.kind == "raw" and c.note]
    assert raw and all("machine contended" in c.note and "waited for a CPU 75%" in c.note for c in raw)
    assert any("normalized figures decide" in n for n in verdict.notes)
    slow = _timed(smoke_result, engine=2.0)  # quiet machine, engine twice as slow per step
    failed = {(c.metric, c.kind) for c in run_gate(base, slow).failures}
    assert {
        ("median_itl_ref", "normalized"),
        ("mean_tpot_ref", "normalized"),
        ("output_tokens_per_ref", "normalized"),
    } <= failed
    both = run_gate(base, _timed(smoke_result, slower=4.0, wait_share=0.75, engine=2.0))
    assert {c.metric for c in both.failures} >= {"median_itl_ref", "mean_tpot_ref", "output_tokens_per_ref"}


def test_raw_latency_is_judged_when_the_machine_was_not_contended(smoke_result: RunResult) -> None:
    base = _timed(smoke_result)
    # latency 4x with no CPU waits and the same reference kernel: nothing on the machine explains it
    worse = _timed(smoke_result, slower=4.0, wait_share=0.0)
    failed = {(c.metric, c.kind) for c in run_gate(base, worse).failures}
    assert ("p99_itl_ms", "raw") in failed and ("output_throughput", "raw") in failed


def test_a_different_thread_count_is_noted(smoke_result: RunResult) -> None:
    one, two = smoke_result.model_copy(deep=True), smoke_result.model_copy(deep=True)
    one.environment.engine_threads, two.environment.engine_threads = 1, 2
    assert any("2 intra-op threads, the baseline 1" in n for n in run_gate(one, two).notes)


def test_a_failed_run_is_no_baseline_unless_allowed(tmp_path: Path) -> None:
    """A run whose requests failed beyond its max_error_rate would make a gate pass failures."""
    import json

    data = json.loads(
        (Path(__file__).resolve().parents[2] / "kvplan" / "data" / "baselines" / "ci-smoke.json").read_text()
    )
    data["verdict"] = "failed"
    source = tmp_path / "failed.json"
    source.write_text(json.dumps(data))
    with pytest.raises(KvplanError, match="failed run"):
        update_baseline(source, tmp_path / "baselines")
    assert not (tmp_path / "baselines").exists() or not any((tmp_path / "baselines").iterdir())
    done = update_baseline(source, tmp_path / "baselines", allow_failed=True, force=True)
    assert done.path.exists()


def test_gate_from_anywhere_uses_the_bundled_ci_smoke_baseline(
    tmp_path: Path, capsys, monkeypatch, smoke_result: RunResult
) -> None:
    """From a wheel (no reports/baselines here), `kvplan gate -r result.json` of ci-smoke gates against
    the baseline kvplan ships, and says so."""
    monkeypatch.chdir(tmp_path)
    src = smoke_result.write_atomic(tmp_path / "result.json")
    rc, out, err = cli(capsys, "gate", "-r", str(src))
    assert "bundled ci-smoke.json" in err and rc in (0, 1) and ("PASS" in out or "FAIL" in out)


def test_baseline_create_takes_any_complete_result(tmp_path: Path, capsys, monkeypatch, mixed: RunResult) -> None:
    """`baseline update` refuses a result that misses its own prediction; `create` stores any complete one
    as the first baseline, and never silently replaces one."""
    monkeypatch.chdir(tmp_path)
    off = mixed.model_copy(deep=True)
    off.prediction["peak_kv_bytes"] = (off.metrics.get("peak_kv_bytes") or 1) * 10  # the planner was wrong
    src = off.write_atomic(tmp_path / "run" / "result.json")
    rc, _, err = cli(capsys, "baseline", "update", str(src))
    assert rc == 2 and "fails its gate" in err
    rc, _, err = cli(capsys, "baseline", "create", str(src))
    target = tmp_path / "reports" / "baselines" / f"{mixed.scenario_name}.json"
    assert rc == 0 and target.read_bytes() == src.read_bytes()
    rc, _, err = cli(capsys, "baseline", "create", str(src))
    assert rc == 2 and "exists" in err and err.count("\n") == 1
    rc, out, _ = cli(capsys, "gate", "-r", str(src))  # now the default baseline: equal to it, but not to its prediction
    assert rc == 1 and "peak_kv_bytes" in out and "reports/baselines" in out.replace("\n", "")


def test_a_slow_machine_is_not_a_prediction_failure_when_the_report_says_so(mixed: RunResult) -> None:
    """The report calls a wall-clock miss that is within tolerance at the measured machine speed
    'likely the machine's speed'; the gate reads the same figure and does not fail it. A miss that
    stays at measured speed (the model's) still fails."""
    from kvplan.report.verdict import build_verdict

    slow = mixed.model_copy(deep=True)
    slow.metrics["median_ttft_ms"] = mixed.prediction["median_ttft_ms"] * 2.0  # measured twice the predicted time
    slow.metrics["machine_speed_ratio"] = 2.0
    slow.normalized_error_pct = {**mixed.normalized_error_pct, "median_ttft_ms": 1.0}  # at measured speed: +1%
    check = next(c for c in run_gate(mixed, slow).checks if c.kind == "prediction" and c.metric == "median_ttft_ms")
    assert check.passed and "machine's speed" in check.note and check.delta_pct == pytest.approx(-50.0)
    assert "Within tolerance after rescaling: median TTFT within 1%" in " ".join(build_verdict(slow).sentences)
    wrong = slow.model_copy(deep=True)
    wrong.normalized_error_pct["median_ttft_ms"] = -45.0  # still off at measured speed: the model
    check = next(c for c in run_gate(mixed, wrong).checks if c.kind == "prediction" and c.metric == "median_ttft_ms")
    assert not check.passed
