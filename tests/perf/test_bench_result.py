"""`kvplan predict --vllm-result`: a result file written by vLLM's own `vllm bench serve` (0.32.0,
tests/data/reference/vllm-bench-serve-result-0.32.json) read back as the run it was, and compared."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.errors import KvplanError
from kvplan.perf.bench_result import compare, load_vllm_bench_result


@pytest.fixture(scope="module")
def vllm_file(reference_dir: Path) -> Path:
    return reference_dir / "vllm-bench-serve-result-0.32.json"


def test_reads_the_run_vllm_wrote(vllm_file: Path) -> None:
    data = json.loads(vllm_file.read_text())
    run = load_vllm_bench_result(vllm_file)
    assert len(run.requests) == data["completed"] == len(data["input_lens"]) and run.failed == 0
    assert [r.prompt_tokens for r in run.requests] == sorted(data["input_lens"])  # all 32 here
    assert [r.output_tokens for r in run.requests] == data["output_lens"]
    due = sorted(s - q for s, q in zip(data["start_times"], data["queue_times"]))
    assert [r.arrival_s for r in run.requests] == pytest.approx([d - due[0] for d in due])
    assert run.max_concurrency == data["max_concurrency"] and run.model_id == data["model_id"]
    assert run.measured["median_ttft_ms"] == data["median_ttft_ms"] and run.measured["duration"] == data["duration"]


def test_predict_that_run_with_one_signed_error(vllm_file: Path) -> None:
    r = CliRunner().invoke(app, ["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4096",
                                 "--vllm-result", str(vllm_file), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    data = json.loads(vllm_file.read_text())
    assert out["predicted"]["completed"] == data["completed"]
    assert out["predicted"]["total_input_tokens"] == data["total_input_tokens"]
    for key, error in out["error_pct"].items():
        assert error == pytest.approx(100 * (out["predicted"][key] - data[key]) / data[key])


def test_compare_sign_convention() -> None:
    rows = compare(
        {"median_ttft_ms": 150.0, "output_throughput": 50.0}, {"median_ttft_ms": 100.0, "output_throughput": 100.0}
    )
    assert {k: e for k, _, _, e in rows} == {
        "output_throughput": pytest.approx(-50.0),
        "median_ttft_ms": pytest.approx(50.0),
    }


@pytest.mark.parametrize(("text", "words"), [
    ("[1]", "a JSON object"),
    ('{"input_lens": [1]}', "no output_lens, start_times"),
    ('{"input_lens": [1, 2], "output_lens": [1], "start_times": [0, 1]}', "output_lens must be a list of 2"),
    ('{"input_lens": [1], "output_lens": [-1], "start_times": [0]}', "token counts are whole numbers"),
    ('{"input_lens": [1], "output_lens": [0], "start_times": [0], "errors": ["boom"]}', "no request succeeded"),
])
def test_not_a_vllm_result_is_one_line(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(KvplanError, match=words):
        load_vllm_bench_result(path)
