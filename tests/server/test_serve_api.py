"""`kvplan serve` endpoints: models, health, metrics names, completions and chat, streaming or not."""
from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvplan.stress.telemetry import parse_metrics

VLLM_NAMES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
              "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
              "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:cache_config_info",
              "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_count",
              "vllm:e2e_request_latency_seconds_sum", "vllm:request_success_total")


def _sse(text: str) -> list[dict | str]:
    events = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[6:]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_models_and_health(kvplan_server) -> None:
    assert httpx.get(f"{kvplan_server.url}/health", timeout=5).status_code == 200
    data = httpx.get(f"{kvplan_server.url}/v1/models", timeout=5).json()
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["tiny"]
    assert data["data"][0]["max_model_len"] == 256


def test_metrics_parse_with_vllm_names(kvplan_server) -> None:
    text = httpx.get(f"{kvplan_server.url}/metrics", timeout=5).text
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert set(VLLM_NAMES) <= names
    assert not any(n.endswith("_created") for n in names)  # as vLLM: no _created series
    figures, labels = parse_metrics(text)
    assert labels is not None and labels["num_gpu_blocks"] == "128" and labels["block_size"] == "16"
    assert 0.0 <= figures["kv_cache_usage_perc"] <= 1.0


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_non_streaming(kvplan_server, api: str) -> None:
    body = {"model": "tiny", "max_tokens": 5, "temperature": 0, "ignore_eos": True}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "t11 t12 t13 hello"}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = [11, 12, 13, 14]
        path = "/v1/completions"
    r = httpx.post(f"{kvplan_server.url}{path}", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    choice = out["choices"][0]
    text = choice["message"]["content"] if api == "chat" else choice["text"]
    assert len(text.split()) == 5 and choice["finish_reason"] == "length"


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_streaming_shape(kvplan_server, api: str) -> None:
    body = {
        "max_tokens": 4,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "t20 t21 t22"}]
    else:
        body["prompt"] = "t20 t21 t22"  # text prompts go through the word tokenizer
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    r = httpx.post(f"{kvplan_server.url}{path}", json=body, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _sse(r.text)
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 4
    assert events[-2]["usage"]["prompt_tokens"] == 3
    chunks = events[1:-2] if api == "chat" else events[:-2]
    if api == "chat":
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        pieces = [c["choices"][0]["delta"]["content"] for c in chunks]
    else:
        pieces = [c["choices"][0]["text"] for c in chunks]
    assert len(pieces) == 4 and all(pieces)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]


@pytest.mark.parametrize("body, status, word", [
    ({"model": "other", "prompt": [5]}, 404, "does not exist"),
    ({"prompt": [5] * 250, "max_tokens": 10}, 400, "maximum context length"),
    ({"prompt": [5], "n": 2}, 400, "unsupported parameters: n"),
    ({"prompt": [999999]}, 400, "token ids"),
    ({"prompt": [[1], [2]]}, 400, "one prompt"),
    ({"prompt": [5], "max_tokens": 0}, 400, "max_tokens"),
])
def test_bad_requests(kvplan_server, body: dict, status: int, word: str) -> None:
    r = httpx.post(f"{kvplan_server.url}/v1/completions", json=body, timeout=10)
    assert r.status_code == status
    assert word in r.json()["error"]["message"]


def test_client_disconnect_aborts_the_request(kvplan_server) -> None:
    """A stream closed by the client must free its blocks: running drops back to 0 quickly."""
    body = {"prompt": [30] * 20, "max_tokens": 200, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{kvplan_server.url}/v1/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        got = sum(1 for _, line in zip(range(6), lines) if line.startswith("data:"))
        assert got >= 2
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        figures, _ = parse_metrics(httpx.get(f"{kvplan_server.url}/metrics", timeout=5).text)
        if figures["num_requests_running"] == 0 and figures["kv_cache_usage_perc"] == 0:
            break
        time.sleep(0.1)
    assert figures["num_requests_running"] == 0 and figures["kv_cache_usage_perc"] == 0
    # it never finished: every request the histogram saw generated at most 100 tokens (the others use a few)
    text = httpx.get(f"{kvplan_server.url}/metrics", timeout=5).text
    samples = {(s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name.startswith("vllm:request_generation_tokens")}
    assert (
        samples[("vllm:request_generation_tokens_bucket", "100.0")]
        == samples[("vllm:request_generation_tokens_count", None)]
    )


def test_access_log_line_per_request(kvplan_server) -> None:
    """`kvplan serve` logs one line per request (like `vllm serve`); `--no-access-log` silences it."""
    from kvplan.server.serve import _log_config

    httpx.get(f"{kvplan_server.url}/v1/models", timeout=10.0)
    deadline = time.monotonic() + 5.0
    while '"GET /v1/models HTTP/1.1" 200' not in kvplan_server.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert '"GET /v1/models HTTP/1.1" 200' in kvplan_server.log_path.read_text()
    assert _log_config(False)["loggers"]["uvicorn.access"]["level"] == "WARNING"
    assert _log_config(True)["loggers"]["uvicorn.error"]["level"] == "WARNING"  # no start-up chatter either way
