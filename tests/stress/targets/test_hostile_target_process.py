"""The issue-29 acceptance run as written, end to end: `kvplan stress --target` against a server
whose every answer is hostile (tokens without end, a byte at a time, an SSE line without end, and
/health and /metrics bodies without end), in a child process under a 3 GiB address-space limit.
It ends on time with exit 1 (failed requests), no traceback, and a result that records them."""
from __future__ import annotations

import asyncio
import itertools
import json
import resource
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from server_helpers import ThreadServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

ADDRESS_SPACE_BYTES = 3 * 2**30
TIMEOUT_S = 0.5
SCENARIO = """name: hostile
model: tiny-llama
engine: {max_model_len: 256, kv_cache_dtype: float32, kv_cache_memory_bytes: 4194304, num_threads: 1}
workload:
  classes:
    - {name: short, prompt_tokens: {dist: fixed, mean: 16}, output_tokens: {dist: fixed, mean: 4}}
arrival: {type: concurrency, concurrency: 6}
num_requests: 6
seed: 1
"""


async def _endless(piece: bytes, pause_s: float = 0.0) -> AsyncIterator[bytes]:
    while True:
        yield piece
        await asyncio.sleep(pause_s)


def _app() -> Starlette:
    token = f"data: {json.dumps({'choices': [{'index': 0, 'text': ' a', 'finish_reason': None}]})}\n\n".encode()
    kinds = itertools.cycle(["forever", "drip", "noline"])

    async def completions(_: Request) -> Response:
        kind = next(kinds)
        piece, pause = {
            "forever": (token, 0.001),
            "drip": (b"d", TIMEOUT_S / 3),
            "noline": (b"data: " + b"a" * 65536, 0.0),
        }[kind]
        return StreamingResponse(_endless(piece, pause), media_type="text/event-stream")

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def endless(_: Request) -> Response:  # /health answers 200 at once, then its body never ends
        return StreamingResponse(_endless(b"x" * 65536))

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]), Route("/v1/models", models),
                             Route("/metrics", endless)])


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def test_a_hostile_target_run_ends_bounded_under_3_gib(tmp_path: Path) -> None:
    server = ThreadServer(_app())
    server.start()
    try:
        scenario = tmp_path / "hostile.yaml"
        scenario.write_text(SCENARIO)
        out = tmp_path / "run"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvplan",
                "stress",
                "--scenario",
                str(scenario),
                "--target",
                server.url,
                "--server-kind",
                "openai",
                "--timeout-s",
                str(TIMEOUT_S),
                "--out",
                str(out),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limit,
        )
    finally:
        server.stop()
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr and "MemoryError" not in done.stderr
    result = json.loads((out / "result.json").read_text())
    errors = " ".join(result["errors"])
    assert result["metrics"]["failed"] == 6 and "SSE line longer" in errors and "more than" in errors


RAW_CASES = itertools.cycle(["negative-chunk", "continue", "pings", "deep", "empty-events"])


async def _raw_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Issue 46's hostile answers, framed by hand (no HTTP library would send them)."""
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            length = next((int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:")), 0)
            await reader.readexactly(length)
            path = head[0].split(" ")[1]
            if path == "/v1/models":
                body = b'{"data":[{"id":"tiny"}]}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            elif path == "/metrics":
                body = b'vllm:cache_config_info{block_size="16",num_gpu_blocks="1e308"} 1\n'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            elif path != "/v1/completions":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            else:
                kind = next(RAW_CASES)
                if kind == "negative-chunk":  # once an endless loop in a hand-written chunk parser
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-6\r\nX")
                elif kind == "deep":
                    event = b"data: " + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n\n"
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(event) + event
                                 + b"\r\n")
                else:
                    piece = {"continue": b"HTTP/1.1 100 Continue\r\n\r\n", "pings": b"5\r\n: p\n\n\r\n",
                             "empty-events": b"2f\r\n" + b'data: {"choices":[{"index":0,"text":""}]}\n\n'[:47]
                             + b"\r\n"}[kind]
                    if kind != "continue":
                        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    while True:  # never ends
                        writer.write(piece)
                        await writer.drain()
                        await asyncio.sleep(0.01)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


def _raw_server() -> tuple[int, Callable[[], None]]:
    import threading

    loop = asyncio.new_event_loop()
    ready: list[int] = []

    async def start() -> None:
        server = await asyncio.start_server(_raw_handler, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    return ready[0], lambda: loop.call_soon_threadsafe(loop.stop)


@pytest.mark.timeout(120)
def test_issue_46_hostile_answers_end_bounded_under_3_gib(tmp_path: Path) -> None:
    """A negative chunk size, endless 100 Continue, endless SSE pings and events without text, an
    event nested 100,000 deep, and a /metrics pool of 1e308 blocks, with the feature probe on
    (--server-kind auto): the run ends within 60 s, exit 1, no traceback, every request recorded."""
    port, stop = _raw_server()
    scenario = tmp_path / "hostile.yaml"
    scenario.write_text(SCENARIO.replace("num_requests: 6", "num_requests: 10"))
    out = tmp_path / "run"
    try:
        done = subprocess.run([sys.executable, "-m", "kvplan", "stress", "--scenario", str(scenario), "--target",
                               f"http://127.0.0.1:{port}", "--timeout-s", "2", "--out", str(out), "--no-progress"],
                              capture_output=True, text=True, timeout=60, preexec_fn=_limit)
    finally:
        stop()
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr and "MemoryError" not in done.stderr
    result = json.loads((out / "result.json").read_text())
    errors = " ".join(result["errors"])
    assert result["metrics"]["failed"] == 10
    assert "chunk size" in errors and "nested too deep" in errors and "no answer for 2 s" in errors
    assert any("1e308" in note and "not a block count" in note for note in result["notes"])
