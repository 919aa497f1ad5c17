"""The HTTP target against a faulty server: 500s, dropped connections, stalls, broken streams.
The run completes, each failure is one error record of the right kind, the API key never leaks,
and an unreachable server is one `KvplanError` line."""
from __future__ import annotations

import json
import uuid

import pytest
from server_helpers import free_port, specs

from kvplan.errors import KvplanError
from kvplan.stress.targets.openai_http import run_http

KINDS = ["ok"] * 3 + ["short", "e500", "e500", "drop", "drop", "stall", "stall", "nodone", "badjson"]
EXPECTED_ERRORS = {"http 500": 2, "disconnected": 2, "timeout": 2, "incomplete": 1, "protocol": 1}
CLIENT_TIMEOUT_S = 0.5


def _run(url: str, **kwargs):
    ids = [f"{kind}-{i:03d}" for i, kind in enumerate(KINDS)]
    return run_http(
        specs(len(KINDS), output_tokens=3, gap_s=0.01, ids=ids), url=url, timeout_s=CLIENT_TIMEOUT_S, **kwargs
    )


@pytest.mark.timeout(120)  # stalls end at the client timeout, not the server's
def test_faulty_server_error_counts(faulty_server) -> None:
    server, _ = faulty_server
    out = _run(server.url)
    assert out.complete
    assert out.errors == EXPECTED_ERRORS
    by_kind = {r.request_id.split("-")[0]: r for r in out.records}
    assert len(out.records) == len(KINDS)
    assert [r.status for r in out.records].count("ok") == 4  # 3 ok + the short one
    assert by_kind["ok"].output_tokens == 3 and len(by_kind["ok"].token_times_s) == 3
    assert out.token_mismatches == ["short-003: asked for 3 tokens, got 2"]
    drop = by_kind["drop"]
    assert drop.status == "error" and drop.error.startswith("disconnected:") and len(drop.token_times_s) == 1
    stall = by_kind["stall"]
    assert stall.error.startswith("timeout:") and stall.first_token_s is not None
    assert stall.finish_s - stall.arrival_s >= CLIENT_TIMEOUT_S
    assert all("\n" not in (r.error or "") for r in out.records)
    # telemetry under the older V0 name, and cache_config_info
    assert out.server_info["num_gpu_blocks"] == 1234 and out.server_info["block_size"] == 32
    assert out.telemetry and out.telemetry[0]["kv_cache_usage_perc"] == 0.25
    assert out.telemetry[0]["num_preemptions_total"] == 7.0


def test_api_key_is_sent_but_never_output(faulty_server, monkeypatch, capsys, caplog) -> None:
    server, seen_auth = faulty_server
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("KVPLAN_TEST_API_KEY", secret)
    out = _run(server.url, api_key_env="KVPLAN_TEST_API_KEY")
    assert f"Bearer {secret}" in seen_auth  # it reached the server...
    e500 = next(r for r in out.records if r.request_id.startswith("e500"))
    assert "***" in e500.error  # ...the server echoed it back, and the client scrubbed it
    dumped = json.dumps({"records": [r.to_dict() for r in out.records], "telemetry": out.telemetry,
                         "server_info": out.server_info, "mismatches": out.token_mismatches, "errors": out.errors})
    captured = capsys.readouterr()
    for text in (dumped, repr(out), str(out), captured.out, captured.err, caplog.text):
        assert secret not in text


def test_missing_api_key_variable(faulty_server, monkeypatch) -> None:
    monkeypatch.delenv("KVPLAN_NO_SUCH_KEY", raising=False)
    with pytest.raises(KvplanError, match="KVPLAN_NO_SUCH_KEY"):
        _run(faulty_server[0].url, api_key_env="KVPLAN_NO_SUCH_KEY")


def test_unreachable_server_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(KvplanError) as info:
        run_http(specs(2), url=url, timeout_s=2.0)
    message = str(info.value)
    assert message.startswith(f"cannot reach {url}: ") and "\n" not in message


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://127.0.0.1/", "http://"])
def test_bad_url(url: str) -> None:
    with pytest.raises(KvplanError, match="http"):
        run_http(specs(1), url=url, timeout_s=1.0)


def test_credentials_in_url_are_not_echoed() -> None:
    url = f"http://user:hunter2@127.0.0.1:{free_port()}"
    with pytest.raises(KvplanError) as info:
        run_http(specs(1), url=url, timeout_s=1.0)
    assert "hunter2" not in str(info.value)


def test_closed_loop_needs_concurrency() -> None:
    with pytest.raises(KvplanError, match="concurrency"):
        run_http(specs(2, gap_s=None), url="http://127.0.0.1:9", timeout_s=1.0)
