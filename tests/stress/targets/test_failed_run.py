"""A failed run never looks like a success: every request failing exits 1, and the console and the
report say "FAILED" with the server's error text; figures the server did not report are "not measured"."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from server_helpers import ThreadServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from kvplan.cli import main
from kvplan.results.result import load_result
from kvplan.stress.scenario_loader import load_scenario


def _refusing_app(refuse_probe: bool = False) -> Starlette:
    """Answers one-token non-streamed requests (kvplan's probe) unless `refuse_probe`; refuses every
    streamed one (the run's requests) with a 422."""
    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def completions(request: Request) -> Response:
        if not (await request.json()).get("stream") and not refuse_probe:
            return JSONResponse({"id": "p", "object": "text_completion", "choices": [{"index": 0, "text": " a",
                                 "finish_reason": "length"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        return JSONResponse(
            {"error": {"message": "Unexpected fields in the request: {'stream_options'}"}}, status_code=422
        )

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models),
                             Route("/v1/completions", completions, methods=["POST"])])  # no /metrics at all


@pytest.fixture()
def refusing_server():
    server = ThreadServer(_refusing_app())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_every_request_failing_exits_1_and_says_failed(refusing_server: ThreadServer, tmp_path: Path, capsys) -> None:
    data = load_scenario("ci-smoke").to_dict()
    data.update(num_requests=6, warmup_requests=0)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", str(path), "--target", refusing_server.url, "--out", str(tmp_path / "o"), "--no-progress",
              "--timeout-s", "10"])
    out, err = capsys.readouterr()
    assert info.value.code == 1
    assert "FAILED" in out and "6 of 6 requests failed" in out and "stream_options" in out
    result = load_result(tmp_path / "o" / "result.json")  # written all the same: it is the evidence
    assert result.verdict == "failed" and any("422" in e for e in result.errors)
    for key in ("num_gpu_blocks", "kv_pool_bytes", "peak_kv_bytes"):  # no /metrics: not measured, not the scenario's
        assert result.metrics[key] is None, key
    html = (tmp_path / "o" / "report.html").read_text()
    assert "FAILED: 6 of 6 requests failed" in html and "not measured" in html


def test_a_refused_first_request_exits_2_in_one_line(tmp_path: Path, capsys) -> None:
    """A server refusing even a one-token request (4xx) is the user's to fix: one line, exit 2, nothing written."""
    server = ThreadServer(_refusing_app(refuse_probe=True))
    server.start()
    try:
        with pytest.raises(SystemExit) as info:
            main(["stress", "-s", "ci-smoke", "--target", server.url, "--out", str(tmp_path / "o"), "--no-progress"])
    finally:
        server.stop()
    _, err = capsys.readouterr()
    assert info.value.code == 2
    assert err.count("\n") == 1 and "HTTP 422" in err and "stream_options" in err
    assert not (tmp_path / "o" / "result.json").exists()
