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
    kinds = ["ok", "forever", "drip", "noline", "ok"]
    out = run_http(specs(len(kinds), output_tokens=3, gap_s=0.01, ids=[f"{k}-{i}" for i, k in enumerate(kinds)]),
                   url=url, timeout_s=TIMEOUT_S, server_kind="openai")
    by_kind = {r.request_id.split("-")[0]: r for r in out.records}
    assert by_kind["ok"].status == "ok"
    assert by_kind["forever"].error.startswith("protocol:") and "more than" in by_kind["forever"].error
    # bytes that never make a whole SSE line are not progress: the idle timeout ends the drip
    assert by_kind["drip"].error.startswith("timeout:") and "no progress" in by_kind["drip"].error
    assert by_kind["noline"].error.startswith("protocol:") and "SSE line longer" in by_kind["noline"].error
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


@pytest.mark.timeout(120)
def test_a_server_that_keeps_to_the_idle_timeout_but_never_ends_meets_the_deadline(serve) -> None:
    """Whole lines that are not tokens (SSE comments), each inside the idle timeout: the total
    deadline, (tokens + 2) x the idle timeout, ends the request."""

    async def completions(_: Request) -> Response:
        return StreamingResponse(_endless(b": keep-alive\n", TIMEOUT_S / 4), media_type="text/event-stream")

    app = hostile_app(metrics="empty")
    app.router.routes[-1] = Route("/v1/completions", completions, methods=["POST"])
    url = serve(app)
    started = time.monotonic()
    out = run_http(specs(1, output_tokens=2), url=url, timeout_s=TIMEOUT_S, server_kind="openai")
    assert out.records[0].error.startswith("timeout:") and "TotalTimeout" in out.records[0].error
    # not before the total deadline: the comment lines, each inside the idle timeout, kept it alive
    # (a lower bound only: a loaded machine makes it later, never earlier)
    assert time.monotonic() - started >= (2 + 2) * TIMEOUT_S
