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


DETAILED = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")  # vLLM 0.19.1
# serve.py drops exactly these without --save-detailed


@pytest.fixture()
def plain_file(vllm_file: Path, tmp_path: Path) -> Path:
    data = {k: v for k, v in json.loads(vllm_file.read_text()).items() if k not in DETAILED}
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(data))
    return path


def test_a_plain_save_result_file_gives_the_run_s_settings(plain_file: Path) -> None:
    data = json.loads(plain_file.read_text())
    run = load_vllm_bench_result(plain_file)
    assert run.requests is None and run.plain is not None
    assert (run.plain.num_prompts, run.plain.request_rate, run.plain.burstiness) == (12, 20.0, 1.0)
    # the means, by hand from the file's totals: 384 / 12 and 96 / 12
    assert (run.plain.mean_input_tokens, run.plain.mean_output_tokens) == (32.0, 8.0)
    assert run.measured["median_ttft_ms"] == data["median_ttft_ms"]


def test_predict_a_plain_file_with_the_lengths_it_ran(plain_file: Path) -> None:
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "4096", "--perf-model",
            "roofline", "--vllm-result", str(plain_file), "--json"]
    r = CliRunner().invoke(app, [*args, "--random-input-len", "32", "--random-output-len", "8"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["predicted"]["completed"] == 12 and out["predicted"]["total_input_tokens"] == 384
    assert "warning" not in r.stderr
    r = CliRunner().invoke(app, args)  # the default 1024 / 128: not what that run sent
    assert r.exit_code == 0 and "--random-input-len 1024 but that run averaged 32 tokens" in r.stderr
