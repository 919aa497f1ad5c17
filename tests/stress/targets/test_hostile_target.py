"""A hostile OpenAI-compatible target cannot hold a run or its memory: bodies that never end, a
byte every so often, tokens without end, a line without a newline. Each costs the requests it
touches (recorded as errors of the right kind) or the probe (one line), and the run ends on time."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
from server_helpers import ThreadServer, specs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from kvplan.errors import KvplanError
from kvplan.stress.targets.openai_http import run_http

TIMEOUT_S = 0.5  # the client's idle timeout in these tests


def _token(text: str = " a") -> bytes:
    return f"data: {json.dumps({'choices': [{'index': 0, 'text': text, 'finish_reason': None}]})}\n\n".encode()


async def _endless(piece: bytes, pause_s: float = 0.0) -> AsyncIterator[bytes]:
    while True:
        yield piece
        await asyncio.sleep(pause_s)


def hostile_app(health: str = "ok", metrics: str = "endless") -> Starlette:
    async def health_route(_: Request) -> Response:
        if health == "endless":
            return StreamingResponse(_endless(b"x" * 65536))
        return Response(status_code=200)

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "hostile", "object": "model"}]})

    async def metrics_route(_: Request) -> Response:
        if metrics == "endless":  # a /metrics body that never ends: the scrape must give up, not buffer it
            return StreamingResponse(_endless(b"# HELP x y\n" * 4096))
        return PlainTextResponse("")

    async def completions(request: Request) -> Response:
        kind = request.headers.get("x-request-id", "ok-").split("-", 1)[0]
        if kind == "forever":  # tokens without end, each well inside the idle timeout
            return StreamingResponse(_endless(_token(), 0.001), media_type="text/event-stream")
        if kind == "drip":  # one byte at a time, each inside the idle timeout, the answer never done
            return StreamingResponse(_endless(b"d", TIMEOUT_S / 3), media_type="text/event-stream")
        if kind == "deep":  # an event nested 100,000 deep: once a RecursionError that lost the whole run
            return StreamingResponse(iter([b"data: " + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n\n"]),
                                     media_type="text/event-stream")
        if kind == "noline":  # an SSE line that never ends
            return StreamingResponse(_endless(b"data: " + b"a" * 65536), media_type="text/event-stream")

        async def ok() -> AsyncIterator[bytes]:
            for _ in range(3):
                yield _token()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(ok(), media_type="text/event-stream")

    return Starlette(routes=[Route("/health", health_route), Route("/v1/models", models),
                             Route("/metrics", metrics_route), Route("/v1/completions", completions, methods=["POST"])])


@pytest.fixture()
def serve():
    servers: list[ThreadServer] = []

    def start(app: Starlette) -> str:
        server = ThreadServer(app)
        server.start()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop()


@pytest.mark.timeout(120)  # every request ends at its deadline: the run cannot hang
def test_hostile_streams_fail_their_requests_and_the_run_ends(serve) -> None:
    url = serve(hostile_app())
    kinds = ["ok", "forever", "drip", "noline", "deep", "ok"]
    out = run_http(specs(len(kinds), output_tokens=3, gap_s=0.01, ids=[f"{k}-{i}" for i, k in enumerate(kinds)]),
                   url=url, timeout_s=TIMEOUT_S, server_kind="openai")
    by_kind = {r.request_id.split("-")[0]: r for r in out.records}
    assert by_kind["ok"].status == "ok"
    assert by_kind["forever"].error.startswith("protocol:") and "more than" in by_kind["forever"].error
    # bytes that carry no content token are not progress: the idle timeout ends the drip
    assert by_kind["drip"].error.startswith("timeout:") and "no answer for 0.5 s" in by_kind["drip"].error
    assert by_kind["noline"].error.startswith("protocol:") and "SSE line longer" in by_kind["noline"].error
    assert by_kind["deep"].error == "protocol: an SSE event nested too deep to read"
    # the /metrics body that never ends was refused at its bound, counted, and did not stop the run
    info = out.server_info
    assert info["metrics_available"] is False and info["metrics_scrape_errors"] >= 1
    assert "ResponseTooLarge" in info["metrics_last_error"]


@pytest.mark.timeout(120)
def test_a_health_body_that_never_ends_is_one_line(serve) -> None:
    url = serve(hostile_app(health="endless", metrics="empty"))
    with pytest.raises(KvplanError) as info:
        run_http(specs(2, output_tokens=3), url=url, timeout_s=TIMEOUT_S, server_kind="openai")
    assert "\n" not in str(info.value) and "larger than" in str(info.value)


NOT_CONTENT = {
    "comments": b": ping\n\n",
    "empty-text": b'data: {"choices":[{"index":0,"text":"","finish_reason":null}]}\n\n',
    "no-choices": b'data: {"choices":[]}\n\n',
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(NOT_CONTENT))
def test_endless_events_without_content_end_at_the_idle_timeout(serve, kind: str) -> None:
    """SSE comments or events without text, each well inside the idle timeout and never ending:
    none is a token, so the request fails once `timeout_s` passes with no content (it once ran to
    (tokens + 2) x timeout_s: 4.3 h at the defaults)."""

    async def completions(_: Request) -> Response:
        return StreamingResponse(_endless(NOT_CONTENT[kind], TIMEOUT_S / 10), media_type="text/event-stream")

    app = hostile_app(metrics="empty")
    app.router.routes[-1] = Route("/v1/completions", completions, methods=["POST"])
    out = run_http(specs(1, output_tokens=50), url=serve(app), timeout_s=TIMEOUT_S, server_kind="openai")
    assert out.records[0].error == "timeout: ReadTimeout (no answer for 0.5 s)"


@pytest.mark.timeout(120)
def test_a_server_that_keeps_to_the_idle_timeout_but_never_ends_meets_the_deadline(serve) -> None:
    """Tokens, each inside the idle timeout, slower than the token cap (2 x 2 + 16) could end them:
    the total deadline, (tokens + 2) x the idle timeout, ends the request."""

    async def completions(_: Request) -> Response:
        return StreamingResponse(_endless(_token(), TIMEOUT_S * 0.8), media_type="text/event-stream")

    app = hostile_app(metrics="empty")
    app.router.routes[-1] = Route("/v1/completions", completions, methods=["POST"])
    url = serve(app)
    started = time.monotonic()
    out = run_http(specs(1, output_tokens=2), url=url, timeout_s=TIMEOUT_S, server_kind="openai")
    assert out.records[0].error == "timeout: TotalTimeout (the answer did not end within 2 s)"
    # not before the total deadline: each token came inside the idle timeout (a lower bound only)
    assert time.monotonic() - started >= (2 + 2) * TIMEOUT_S
