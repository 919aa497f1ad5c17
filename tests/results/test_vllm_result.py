"""result.vllm.json: exactly the keys of `vllm bench serve --save-result --save-detailed`
(tests/data/reference/vllm-bench-serve-result.json), per-request arrays as vLLM fills them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvplan.results.metrics import compute_metrics
from kvplan.results.record import RequestRecord
from kvplan.results.result import RunResult, collect_environment, load_result
from kvplan.results.vllm_result import max_output_tokens_per_s, vllm_bench_result
from kvplan.stress.scenario_loader import load_scenario


@pytest.fixture(scope="module")
def reference(reference_dir: Path) -> dict:
    return json.loads((reference_dir / "vllm-bench-serve-result.json").read_text())


def _records() -> list[RequestRecord]:
    ok = RequestRecord("r0", "short", 0.0, 0.2, (0.2, 0.3, 0.5), 0.5, 10, 3)
    warm = RequestRecord("w0", "short", 0.0, 0.1, (0.1,), 0.1, 10, 1, is_warmup=True)
    bad = RequestRecord("r1", "short", 0.1, None, (), 0.4, 12, 0, status="error", error="http 500: boom")
    ok2 = RequestRecord("r2", "long", 0.2, 0.6, (0.6, 1.7), 1.7, 20, 2)
    return [warm, ok, bad, ok2]


def _result() -> RunResult:
    scenario = load_scenario("ci-smoke")
    records = _records()
    return RunResult(
        scenario=scenario.to_dict(),
        environment=collect_environment(),
        requests=[r.to_dict() for r in records],
        metrics=compute_metrics(records, scenario.slo),
    )


def test_exactly_vllms_keys_in_vllms_order(reference: dict) -> None:
    out = vllm_bench_result(_result())
    statistics = [k for k in out if re.match(reference["statistic_pattern"], k)]
    assert list(out) == reference["setup_keys"] + reference["result_keys"] + statistics
    assert {"mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "std_e2el_ms"} <= set(statistics)


def test_per_request_arrays_as_vllm_fills_them(reference: dict) -> None:
    out = vllm_bench_result(_result())
    assert all(len(out[k]) == 3 for k in reference["per_request_arrays"])  # the warmup request is left out
    assert out["input_lens"] == [10, 12, 20] and out["output_lens"] == [3, 0, 2]
    assert out["ttfts"] == pytest.approx([0.2, 0.0, 0.4])
    assert (
        out["itls"][0] == pytest.approx([0.1, 0.2]) and out["itls"][1] == [] and out["itls"][2] == pytest.approx([1.1])
    )
    assert out["errors"] == ["", "http 500: boom", ""] and out["start_times"] == [0.0, 0.1, 0.2]
    assert out["completed"] == 2 and out["failed"] == 1 and out["num_prompts"] == 3
    assert out["request_rate"] == "inf" and out["max_concurrency"] == 8  # ci-smoke: closed loop of 8 users
    assert out["max_output_tokens_per_s"] == 4  # 0.2, 0.3, 0.5, 0.6 in the first second; 1.7 in the next


def test_max_output_tokens_per_s_of_nothing() -> None:
    assert max_output_tokens_per_s([]) == 0.0


def test_old_results_load_the_renamed_figure(tmp_path: Path) -> None:
    """Results written before the rename (`max_concurrency` for the engine's running peak) still load."""
    data = json.loads(_result().to_json())
    data["metrics"]["max_concurrency"] = 5
    data["prediction"] = {"max_concurrency": 6}
    data["scenario"]["gate"] = {"exact": ["num_steps", "max_concurrency"], "relative": {"max_concurrency": "+0%"}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    loaded = load_result(path)
    assert loaded.metrics["peak_running_requests"] == 5 and "max_concurrency" not in loaded.metrics
    assert loaded.prediction["peak_running_requests"] == 6
    assert loaded.scenario["gate"]["exact"] == ["num_steps", "peak_running_requests"]  # an old baseline still gates
    assert list(loaded.scenario["gate"]["relative"]) == ["peak_running_requests"]


@pytest.mark.parametrize("field, value", [("running", "7"), ("kv_bytes_used", 12.5), ("waiting", True), ("t_s", "0.5")])
def test_a_timeline_sample_of_the_wrong_type_is_bad_input(tmp_path, field: str, value: object) -> None:
    """A result whose timeline says "7" for a count is refused in one line, not read as 7."""
    import json

    from kvplan.errors import KvplanError
    from kvplan.results.result import load_result

    data = json.loads(
        (Path(__file__).resolve().parents[2] / "kvplan" / "data" / "baselines" / "ci-smoke.json").read_text()
    )
    data["timeline"][3][field] = value
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KvplanError, match="timeline"):
        load_result(path)
