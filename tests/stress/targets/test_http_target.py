"""`run_http` against a real `kvplan serve`: records, token counts, telemetry, server info."""
from __future__ import annotations

import httpx
from server_helpers import specs

from kvplan.stress.targets.openai_http import run_http
from kvplan.stress.telemetry import parse_metrics


def _prompt_tokens_total(url: str) -> float:
    return parse_metrics(httpx.get(f"{url}/metrics", timeout=5).text)[0]["prompt_tokens_total"]


def test_open_loop_completions(kvplan_server) -> None:
    reqs = specs(12, prompt_tokens=24, output_tokens=6, gap_s=0.03)
    seen: list[int] = []
    out = run_http(reqs, url=kvplan_server.url + "/v1/", timeout_s=30.0, warmup_request_ids={"req-000000"},
                   on_progress=seen.append, scrape_interval_s=0.1)
    assert out.complete and out.errors == {} and out.token_mismatches == []
    assert [r.request_id for r in out.records] == [r.request_id for r in reqs]
    assert seen == list(range(1, 13))
    for rec, spec in zip(out.records, reqs):
        assert rec.status == "ok" and rec.error is None
        assert rec.output_tokens == 6 and len(rec.token_times_s) == 6
        assert rec.prompt_tokens == 24 and rec.class_name == spec.class_name
        assert rec.arrival_s >= spec.arrival_s - 1e-3  # sent at (not before) its arrival time
        assert rec.arrival_s < rec.first_token_s <= rec.token_times_s[-1] <= rec.finish_s
        assert list(rec.token_times_s) == sorted(rec.token_times_s)
    assert [r.is_warmup for r in out.records] == [True] + [False] * 11
    info = out.server_info
    assert info["model"] == "tiny" and info["url"] == kvplan_server.url
    assert info["num_gpu_blocks"] == 128 and info["block_size"] == 16 and info["metrics_available"]
    assert len(out.telemetry) >= 2
    t = [s["t_s"] for s in out.telemetry]
    assert t == sorted(t) and t[0] < out.records[0].finish_s
    assert {
        "kv_cache_usage_perc",
        "num_requests_running",
        "num_requests_waiting",
        "num_preemptions_total",
        "prefix_cache_queries_total",
        "prefix_cache_hits_total",
        "generation_tokens_total",
    } <= set(out.telemetry[-1])
    assert all(0.0 <= s["kv_cache_usage_perc"] <= 1.0 for s in out.telemetry)


def test_closed_loop_chat_keeps_prompt_ids(kvplan_server) -> None:
    """Chat prompts in the word form reach the engine as exactly the spec's token ids."""
    reqs = specs(6, prompt_tokens=10, output_tokens=3, gap_s=None)
    before = _prompt_tokens_total(kvplan_server.url)
    out = run_http(reqs, url=kvplan_server.url, api="chat", served_model_name="tiny", timeout_s=30.0, concurrency=2,
                   server_kind="vllm")  # no probe requests: the counter below sees only these
    assert out.errors == {} and out.token_mismatches == []
    assert all(r.status == "ok" and r.output_tokens == 3 and len(r.token_times_s) == 3 for r in out.records)
    assert all(r.server_input_tokens == 10 and r.server_output_tokens == 3 for r in out.records)
    assert _prompt_tokens_total(kvplan_server.url) - before == 6 * 10
    # closed loop with 2 workers: never more than 2 open at once
    spans = sorted((r.arrival_s, r.finish_s) for r in out.records)
    for i, (start, _) in enumerate(spans):
        assert sum(1 for s, f in spans[:i] if f > start) <= 1


def test_refused_request_is_an_error_record(kvplan_server) -> None:
    reqs = specs(1, prompt_tokens=252, output_tokens=6, gap_s=0.0)
    out = run_http(reqs, url=kvplan_server.url, timeout_s=30.0)
    # 252 + 6 > max_model_len 256: the server refuses it up front (HTTP 400), an error, not a crash
    assert out.records[0].status == "error" and out.errors == {"http 400": 1}
    assert "maximum context length" in out.records[0].error
