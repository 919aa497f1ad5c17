"""`kvplan stress --target` against a real `kvplan serve`: the same pool as the
in-process run, the server's KV curve in the result and the report, and the API key nowhere."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_helpers import ROOT, ServeProcess

from kvplan.cli.stress_command import stress_and_report
from kvplan.results.result import load_result
from kvplan.stress.scenario_loader import load_scenario
from kvplan.stress.stress_run import StressOptions

SMOKE = ROOT / "scenarios" / "ci-smoke.yaml"
SECRET = "sk-kvplan-test-8c1f0e"


@pytest.fixture(scope="module")
def smoke_server() -> Iterator[ServeProcess]:
    e = load_scenario(SMOKE).engine
    server = ServeProcess(
        "--model",
        "tiny-llama",
        "--served-model-name",
        "tiny",
        "--max-model-len",
        str(e.max_model_len),
        "--block-size",
        str(e.block_size),
        "--max-num-seqs",
        str(e.max_num_seqs),
        "--max-num-batched-tokens",
        str(e.max_num_batched_tokens),
        "--kv-cache-dtype",
        e.kv_cache_dtype,
        "--kv-cache-memory-bytes",
        str(e.kv_cache_memory_bytes),
    )
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def test_stress_target_matches_in_process_pool(smoke_server: ServeProcess, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KVPLAN_TEST_KEY", SECRET)
    outcome = stress_and_report(StressOptions(SMOKE, tmp_path, progress=False, target=smoke_server.url,
                                       served_model_name="tiny", api_key_env="KVPLAN_TEST_KEY", timeout_s=30.0,
                                       output_format="vllm"))
    result = load_result(tmp_path / "result.json")
    scenario = load_scenario(SMOKE)
    assert result.complete and result.metrics["completed"] == scenario.num_requests - scenario.warmup_requests
    assert result.metrics["failed"] == 0 and result.metrics["token_mismatches"] == 0
    # same pool as the in-process engine and as the prediction
    assert result.metrics["num_gpu_blocks"] == result.prediction["num_gpu_blocks"] == scenario.num_gpu_blocks()
    assert result.server_info["num_gpu_blocks"] == scenario.num_gpu_blocks()
    # the server's KV usage curve, scaled to bytes, never above the pool
    used = [s.kv_bytes_used for s in result.timeline if s.kv_bytes_used is not None]
    assert used and max(used) <= result.metrics["kv_pool_bytes"] and max(used) > 0
    assert result.server_telemetry
    assert not outcome.failed
    for path in outcome.written:
        assert SECRET not in Path(path).read_text()
    assert "server" in (tmp_path / "report.html").read_text().lower()
    vllm = json.loads((tmp_path / "result.vllm.json").read_text())  # as `vllm bench serve --save-result` writes
    measured = scenario.num_requests - scenario.warmup_requests
    assert (
        vllm["completed"] == measured
        and len(vllm["ttfts"]) == len(vllm["itls"]) == len(vllm["start_times"]) == measured
    )
    assert vllm["output_lens"] == [r.output_tokens for r in result.records() if not r.is_warmup]
    assert all(r.server_input_tokens == r.prompt_tokens for r in result.records())  # the server's own count


def test_stress_target_replays_sharegpt_text_from_vllm_bench_flags(smoke_server: ServeProcess, tmp_path: Path) -> None:
    """`kvplan stress --target URL --model M --dataset-name sharegpt --dataset-path f.json --request-rate R
    --num-prompts N`: no YAML; the conversations' own text is sent, the server counts it."""
    from kvplan.stress.bench_flags import BenchFlags

    words = lambda n: " ".join(f"w{10 + i % 90}" for i in range(n))  # noqa: E731 - 4-byte words: one token each
    convs = [{"conversations": [{"from": "human", "value": words(20 + 5 * i)}, {"from": "gpt", "value": words(6 + i)}]}
             for i in range(12)]
    dataset = tmp_path / "sharegpt.json"
    dataset.write_text(json.dumps(convs))
    out = tmp_path / "out"
    outcome = stress_and_report(
        StressOptions(
            None,
            out,
            progress=False,
            target=smoke_server.url,
            served_model_name="tiny",
            timeout_s=30.0,
            bench=BenchFlags(
                model="tiny-llama", dataset_name="sharegpt", dataset_path=str(dataset), request_rate=40.0, num_prompts=8
            ),
        )
    )
    assert not outcome.failed
    result = load_result(out / "result.json")
    records = result.records()
    assert len(records) == 8 and all(r.status == "ok" for r in records)
    prompts = {len(c["conversations"][0]["value"].split()) for c in convs}
    assert {r.prompt_tokens for r in records} <= prompts  # the dataset's prompts, in vLLM's shuffled order
    assert all(r.server_input_tokens == r.prompt_tokens for r in records)  # sent as text, counted by the server
    assert result.scenario["arrival"] == {"type": "poisson", "rate_per_s": 40.0, "ramp_s": 0.0}


def test_stress_target_plans_from_the_servers_settings(smoke_server: ServeProcess, tmp_path: Path) -> None:
    """No scenario engine section matches the server: the prediction takes the server's pool and
    max_model_len (read from /metrics and /v1/models) and says which settings differed; --gpu gives
    the prediction latencies from kvplan predict's GPU model."""
    from kvplan.stress.bench_flags import BenchFlags

    out = tmp_path / "out"
    outcome = stress_and_report(
        StressOptions(
            None,
            out,
            progress=False,
            target=smoke_server.url,
            served_model_name="tiny",
            timeout_s=30.0,
            gpu="h100",
            bench=BenchFlags(
                model="tiny-llama", random_input_len=48, random_output_len=6, num_prompts=6, max_concurrency=3
            ),
        )
    )
    assert not outcome.failed
    result = load_result(out / "result.json")
    server = load_scenario(SMOKE).engine
    assert (
        result.prediction["num_gpu_blocks"] == result.metrics["num_gpu_blocks"] == load_scenario(SMOKE).num_gpu_blocks()
    )
    assert result.scenario["engine"]["max_model_len"] == server.max_model_len
    assert any(n.startswith("server set up differently:") and "max_model_len 1024" in n for n in result.notes)
    assert not any("the server's pool has" in n for n in result.notes)  # planned with it: no mismatch left
    assert "GPU step cost" in result.prediction["cost_model_source"] and result.prediction["median_ttft_ms"] > 0
