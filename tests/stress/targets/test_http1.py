"""The hot-path HTTP/1.1 client (`kvplan.stress.targets.http1`) against a scripted raw-socket
server: framing split at every byte, keep-alive reuse and its refusals, interim responses, and each
failure kind (timeout, disconnect, bad framing, refused connect, a sink that rejects its bytes)."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import pytest
from server_helpers import free_port, specs

from kvplan.stress.targets.http1 import Http1Pool, HttpConnectError, HttpDisconnected, HttpProtocolError, HttpTimeout
from kvplan.stress.targets.openai_http import run_http

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict[str, str]], Awaitable[None]]


def _chunked(*parts: bytes) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


class RawServer:
    """Reads each request head and body, then runs `script(reader, writer, headers)` to answer."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[dict[str, str]] = []
        self.port = 0

    async def __aenter__(self) -> RawServer:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                while True:
                    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in head[1:] if ln)}
                    headers[":path"] = head[0].split(" ")[1]
                    await reader.readexactly(int(headers.get("content-length", "0")))
                    self.requests.append(headers)
                    await self.script(reader, writer, headers)
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    def pool(self, timeout_s: float = 2.0) -> Http1Pool:
        return Http1Pool("http", "127.0.0.1", self.port, headers={"Authorization": "Bearer sk-x"},
                         connect_timeout_s=timeout_s, read_timeout_s=timeout_s)


async def _post(pool: Http1Pool) -> tuple[int, bytes, list[float]]:
    got: list[bytes] = []
    stamps: list[float] = []

    def sink(data: bytes, t: float) -> None:
        got.append(data)
        stamps.append(t)

    status = await pool.post_stream("/v1/completions", b'{"a":1}', {"X-Request-Id": "r1"}, sink)
    return status, b"".join(got), stamps


def _run(script: Script, body: Callable[[RawServer], Awaitable[None]]) -> RawServer:
    async def main() -> RawServer:
        async with RawServer(script) as server:
            await body(server)
        return server

    return asyncio.run(main())


def test_chunked_body_split_at_every_byte_and_keep_alive() -> None:
    events = b"data: {\"x\": 1}\n\n" + b"data: [DONE]\n\n"
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(events[:7], events[7:])

    async def script(_r, writer, _h) -> None:
        for i in range(len(wire)):  # one byte per TCP segment: every parser state sees a split
            writer.write(wire[i:i + 1])
            await writer.drain()
            await asyncio.sleep(0)

    async def body(server: RawServer) -> None:
        pool = server.pool()
        for _ in range(3):
            status, data, stamps = await _post(pool)
            assert status == 200 and data == events and stamps == sorted(stamps)
        pool.close()

    server = _run(script, body)
    assert server.connections == 1 and len(server.requests) == 3  # one connection, reused
    assert server.requests[0]["authorization"] == "Bearer sk-x" and server.requests[0]["x-request-id"] == "r1"
    assert server.requests[0]["accept-encoding"] == "identity"


@pytest.mark.parametrize("head, reused", [
    (b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\n", True),
    (b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\nConnection: close\r\n\r\n", False),
    (b"HTTP/1.0 500 Internal Server Error\r\nContent-Length: 5\r\n\r\n", False),
])
def test_content_length_and_connection_close(head: bytes, reused: bool) -> None:
    async def script(_r, writer, _h) -> None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + head + b"oops!")

    async def body(server: RawServer) -> None:
        pool = server.pool()
        for _ in range(2):
            assert (await _post(pool))[:2] == (500, b"oops!")
        pool.close()

    assert _run(script, body).connections == (1 if reused else 2)


def test_body_until_close() -> None:
    async def script(_r, writer, _h) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nsome body")
        await writer.drain()
        writer.close()

    async def body(server: RawServer) -> None:
        assert (await _post(server.pool()))[:2] == (200, b"some body")

    _run(script, body)


@pytest.mark.parametrize("wire, error, text", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", HttpProtocolError, "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY", HttpProtocolError, "after chunk data"),
    (b"SMTP ready\r\n\r\n", HttpProtocolError, "not valid HTTP/1.1: Expected HTTP/"),
    # a negative chunk size once looped forever in a hand-written parser; llhttp refuses it
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-6\r\nX", HttpProtocolError, "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 20 + b"\r\n", HttpProtocolError, "overflow"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
     HttpProtocolError, "can't be present with"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi", HttpProtocolError, "Duplicate"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n", HttpProtocolError,
     "switched protocols"),
    # interim heads without end: bounded like one head (64 KiB), not a stream that never ends
    (b"HTTP/1.1 100 Continue\r\n\r\n" * 5000, HttpProtocolError, "head too long"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n", HttpProtocolError, "head too long"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx", HttpProtocolError, "gzip"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", HttpDisconnected, "complete message body"),
    (b"", HttpDisconnected, "without sending a response"),
])
def test_broken_responses(wire: bytes, error: type[Exception], text: str) -> None:
    async def script(_r, writer, _h) -> None:
        writer.write(wire)
        await writer.drain()
        writer.close()  # ends every case: a complete response would not need it

    async def body(server: RawServer) -> None:
        with pytest.raises(error, match=text):
            await _post(server.pool())

    _run(script, body)


def test_bytes_after_the_response_end_the_connection_not_the_answer() -> None:
    async def script(_r, writer, _h) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiGARBAGE")

    async def body(server: RawServer) -> None:
        pool = server.pool()
        for _ in range(2):
            assert (await _post(pool))[:2] == (200, b"hi")
        pool.close()

    assert _run(script, body).connections == 2  # never reused: its next answer would start with GARBAGE


def test_trailers_are_not_headers() -> None:
    heads: list[dict[str, str]] = []

    async def script(_r, writer, _h) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"
                     b"2\r\nhi\r\n0\r\nX-A: 2\r\nX-B: 3\r\n\r\n")

    async def body(server: RawServer) -> None:
        pool = server.pool()
        status = await pool.post_stream("/x", b"", {}, lambda _d, _t: None,
                                        on_head=lambda _c, _r, headers: heads.append(headers))
        assert status == 200
        pool.close()

    assert _run(script, body).connections == 1
    assert heads == [{"transfer-encoding": "chunked", "x-a": "1"}]


def test_stall_is_a_timeout_after_the_read_timeout() -> None:
    async def script(_r, writer, _h) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"2\r\nhi\r\n")
        for _ in range(3):  # bytes every 0.2 s keep a 0.3 s read timeout from firing...
            await asyncio.sleep(0.2)
            writer.write(b"1\r\n.\r\n")
        await asyncio.sleep(5)  # ...then silence

    async def body(server: RawServer) -> None:
        started = time.perf_counter()
        with pytest.raises(HttpTimeout, match="no data for 0.3 s"):
            await _post(server.pool(timeout_s=0.3))
        # the 0.2 s chunks reset the read timeout three times (a lower bound: load only makes it later)
        assert time.perf_counter() - started >= 0.9

    _run(script, body)


def test_refused_connect_and_rejecting_sink() -> None:
    async def main() -> None:
        pool = Http1Pool("http", "127.0.0.1", free_port(), headers={}, connect_timeout_s=1.0, read_timeout_s=1.0)
        with pytest.raises(HttpConnectError):
            await _post(pool)

    asyncio.run(main())

    async def script(_r, writer, _h) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad")

    async def body(server: RawServer) -> None:
        pool = server.pool()

        def sink(_data: bytes, _t: float) -> None:
            raise ValueError("not JSON")

        for _ in range(2):
            with pytest.raises(ValueError, match="not JSON"):
                await pool.post_stream("/x", b"", {}, sink)
        with pytest.raises(HttpProtocolError, match="line break"):
            await pool.post_stream("/x", b"", {"X-Request-Id": "a\r\nInjected: 1"}, sink)

    assert _run(script, body).connections == 2  # a connection whose body was rejected is not reused


def test_closed_loop_holds_one_connection_per_user() -> None:
    """run_http over http1: every request exactly once, on `concurrency` pre-opened connections."""
    async def script(_r, writer, headers) -> None:
        path = headers[":path"]
        if path == "/v1/models":
            data = b'{"data":[{"id":"m"}]}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
        elif path == "/v1/completions":
            tok = json.dumps({"choices": [{"index": 0, "text": " t", "finish_reason": None}]})
            usage = json.dumps({"choices": [], "usage": {"completion_tokens": 3}})
            events = [f"data: {tok}\n\n".encode()] * 3 + [f"data: {usage}\n\ndata: [DONE]\n\n".encode()]
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for event in events:
                await asyncio.sleep(0.002)
                writer.write(_chunked(event)[:-5])  # the chunk without the terminating 0-chunk
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    async def body(server: RawServer) -> None:
        reqs = specs(20, output_tokens=3, gap_s=None)
        out = await asyncio.to_thread(run_http, reqs, url=f"http://127.0.0.1:{server.port}", timeout_s=5.0,
                                      concurrency=4, scrape_interval_s=3600.0, server_kind="vllm")  # no probe requests
        assert [r.request_id for r in out.records] == [r.request_id for r in reqs] and out.errors == {}
        assert all(r.output_tokens == 3 and len(r.token_times_s) == 3 for r in out.records)
        assert all(r.arrival_s < r.first_token_s <= r.finish_s for r in out.records)
        streamed = [h for h in server.requests if h[":path"] == "/v1/completions"]
        assert sorted(h["x-request-id"] for h in streamed) == sorted(r.request_id for r in reqs)

    server = _run(script, body)
    assert server.connections <= 4 + 2  # 4 pooled for the streams, plus httpx's probe and /metrics



@pytest.mark.timeout(60)  # before: interim heads counted as progress, so this ran to (tokens + 2) x timeout
def test_endless_interim_heads_and_a_silent_probe_obey_the_timeout() -> None:
    """A server that answers /v1/completions with `100 Continue` forever: the feature probe
    (--server-kind auto) and every request end within --timeout-s each, not 120 s per probe read."""
    async def script(_r, writer, headers) -> None:
        if headers[":path"] == "/v1/models":
            data = b'{"data":[{"id":"m"}]}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
            return
        if headers[":path"] != "/v1/completions":
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        while True:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    async def body(server: RawServer) -> None:
        out = await asyncio.to_thread(run_http, specs(3, output_tokens=100, gap_s=None), concurrency=3,
                                      url=f"http://127.0.0.1:{server.port}", timeout_s=0.5, scrape_interval_s=3600.0)
        assert [r.error for r in out.records] == ["timeout: ReadTimeout (no answer for 0.5 s)"] * 3
        assert out.server_info["server_kind"].startswith("auto (unprobed")  # the probe gave up at the bound

    _run(script, body)
