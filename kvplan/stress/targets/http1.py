"""The load generator's HTTP/1.1 client: streamed POSTs over keep-alive connections, asyncio's
transport for the sockets and llhttp (through httptools, the parser uvicorn uses) for the framing,
with the response body handed to a callback straight from `data_received`.

Why not httpx here: with httpx every socket read wakes the request's task and walks anyio, httpcore
and h11 (~20 us of CPU per streamed chunk), so one process saturates a core near 250 streams and
the queueing shows up as latency the server never caused. Here a read costs one llhttp call, its
callbacks and the caller's own parsing; the request's task sleeps until the response ends. httpx
still does the cold paths (probe, /metrics).

Supported: `Transfer-Encoding: chunked`, `Content-Length` and read-until-close bodies, keep-alive
(a connection is reused only after a cleanly framed response llhttp says may be kept alive), TLS
through asyncio's SSL transport, 1xx interim responses. No proxies, no compression (we ask for
`identity` and refuse anything else).

Bounds, whatever the server sends: a head of at most 64 KiB (interim heads included), an answer of
at most `max_response_bytes`, `read_timeout_s` without progress (the caller's `progress`, else any
byte), `total_timeout_s` for the whole answer, `connect_timeout_s` for the connect.

Failures are exceptions, one class per error kind the HTTP target records: `HttpConnectError`,
`HttpTimeout` (no progress for `read_timeout_s`, past `total_timeout_s`, or a connect slower than
`connect_timeout_s`), `HttpDisconnected` (the peer closed or reset the connection before the
response ended) and `HttpProtocolError` (a response llhttp refuses, or one past a bound). An
exception raised by the body callback ends the request with that exception and discards the
connection.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable

import httptools

BodySink = Callable[[bytes, float], None]  # (body bytes, perf_counter() when they were read)
HeadCallback = Callable[[int, str, dict[str, str]], None]  # (status, reason phrase, headers by lower-case name)
MAX_HEAD_BYTES = 64 * 1024
MAX_RESPONSE_BYTES = 256 * 2**20  # one streamed answer: 100k tokens of vLLM's SSE stay below 64 MB


class HttpError(Exception):
    pass


class HttpConnectError(HttpError):
    pass


class HttpTimeout(HttpError):
    pass


class HttpDisconnected(HttpError):
    pass


class HttpProtocolError(HttpError):
    pass


class _Stop(Exception):
    """Raised inside a parser callback to stop llhttp where the exchange already knows its fate."""


class _Exchange:
    """One request/response on one connection: llhttp's callbacks, timers, the completion future.

    The bytes go to llhttp (`httptools.HttpResponseParser`, the parser uvicorn uses): it owns the
    framing (chunk sizes, Content-Length, interim 1xx responses, trailers) and refuses what is not
    HTTP/1.1. What is kvplan's: the bounds (head size, answer size), the timers, and what counts
    as progress."""

    __slots__ = ("conn", "sink", "status_callback", "head_callback", "future", "parser", "status", "keep_alive",
                 "last_read_s", "timeout_s", "timer", "deadline", "received", "max_bytes", "progress", "now_s",
                 "headers", "reason", "head_bytes", "in_body", "until_close", "done", "error", "sent_s", "head_size")

    def __init__(self, conn: _Connection, sink: BodySink, on_status: Callable[[int], None] | None, timeout_s: float,
                 on_head: HeadCallback | None = None, total_timeout_s: float | None = None,
                 max_bytes: int = MAX_RESPONSE_BYTES, progress: Callable[[], float] | None = None) -> None:
        self.conn = conn
        self.sink = sink
        self.status_callback = on_status
        self.head_callback = on_head
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.keep_alive = True
        self.headers: dict[str, str] = {}
        self.reason = ""
        self.head_bytes = 0  # bytes read before the final head ended: bounded by MAX_HEAD_BYTES
        self.head_size = 0  # the current head's header bytes, as llhttp hands them over
        self.in_body = self.until_close = self.done = False
        self.error: BaseException | None = None  # the sink's verdict, raised past llhttp
        self.timeout_s = timeout_s
        self.now_s = self.last_read_s = self.sent_s = time.perf_counter()
        # one timer per request, re-armed only when it fires (not on every read): cheap at any rate
        self.timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(timeout_s, self._check_timeout)
        # the whole answer's time, whatever the gaps: a server that drips or streams forever ends here
        self.deadline: asyncio.TimerHandle | None = None if total_timeout_s is None else \
            asyncio.get_running_loop().call_later(total_timeout_s, self.fail, HttpTimeout(
                f"TotalTimeout (the answer did not end within {total_timeout_s:g} s)"))
        self.received, self.max_bytes = 0, max_bytes
        # when the answer last made progress (perf_counter; 0: not yet): the caller's notion (a
        # content token), so bytes that carry none (pings, empty events, 1xx heads) do not keep
        # the request alive; without it, any byte does
        self.progress = progress

    def _check_timeout(self) -> None:
        last = self.progress() if self.progress is not None else self.last_read_s
        idle_s = time.perf_counter() - (last or self.sent_s)
        if idle_s >= self.timeout_s * 0.999:
            self.timer = None
            what = "data" if self.progress is None else ("progress" if last else "answer")
            self.fail(HttpTimeout(f"ReadTimeout (no {what} for {self.timeout_s:g} s)"))
        else:
            self.timer = asyncio.get_running_loop().call_later(self.timeout_s - idle_s, self._check_timeout)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)
        self.conn.discard()

    def finish(self) -> None:
        self.done = True
        if not self.future.done():
            self.future.set_result(self.status)

    def feed(self, data: bytes) -> None:
        self.now_s = self.last_read_s = time.perf_counter()  # the stamp of every event in these bytes
        self.received += len(data)
        if self.received > self.max_bytes:
            self.fail(HttpProtocolError(f"answer larger than {self.max_bytes:,} bytes"))
            return
        if not self.in_body:  # llhttp sets no bound on a head (nor on endless 1xx heads): this does
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # a callback stopped llhttp (_Stop): its reason is set
            if self.error is None and not self.done:  # anything else a callback raised is a bug: say it
                self.error = HttpProtocolError(f"the answer could not be read: {exc.__context__!r}")
        except httptools.HttpParserUpgrade:
            self.fail(HttpProtocolError(
                f"the server switched protocols (HTTP {self.parser.get_status_code()}) instead of answering"))
            return
        except httptools.HttpParserError as exc:
            if self.error is None and not self.done:
                self.fail(HttpProtocolError(f"not valid HTTP/1.1: {_llhttp_reason(exc)}"))
                return
            self.keep_alive = False
        if self.error is not None:
            self.fail(self.error)
        elif not self.in_body and self.head_bytes > MAX_HEAD_BYTES:
            self.fail(HttpProtocolError("response head too long"))

    # llhttp's callbacks (names fixed by httptools)

    def on_message_begin(self) -> None:
        if self.done:  # bytes after the response: not a connection to reuse, and not ours to parse
            self.keep_alive = False
            raise _Stop
        self.headers, self.head_size = {}, 0

    def on_status(self, reason: bytes) -> None:
        self.reason = reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.in_body:  # a trailer (after a chunked body): not part of the head
            return
        self.head_size += len(name) + len(value) + 4  # one read may hold a whole oversized head
        if self.head_size > MAX_HEAD_BYTES:
            self._stop(HttpProtocolError("response head too long"))
        key, text = name.decode("latin-1").strip().lower(), value.decode("latin-1").strip()
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim response (100 Continue): the real one follows
            return
        self.status, self.in_body = status, True
        headers = self.headers
        self.keep_alive = self.parser.should_keep_alive()
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", ""):
            self._stop(HttpProtocolError(f"unsupported content-encoding {encoding!r} (identity was asked for)"))
        self.until_close = "chunked" not in headers.get("transfer-encoding", "").lower() \
            and "content-length" not in headers and status not in (204, 304)
        try:
            if self.status_callback is not None:
                self.status_callback(status)
            if self.head_callback is not None:
                self.head_callback(status, self.reason, headers)
        except Exception as exc:  # noqa: BLE001 - the caller's verdict on the head
            self._stop(exc)

    def on_body(self, body: bytes) -> None:
        try:
            self.sink(body, self.now_s)
        except Exception as exc:  # noqa: BLE001 - bad JSON, an error event: the sink's verdict
            self._stop(exc)

    def on_message_complete(self) -> None:
        if not self.in_body:  # the end of an interim response
            return
        self.finish()

    def _stop(self, exc: BaseException) -> None:
        self.error = exc
        raise _Stop

    def lost(self, exc: BaseException | None) -> None:
        if self.done:
            return
        if self.until_close and self.error is None:  # the close is what ends such a body
            self.keep_alive = False
            self.finish()
        elif not self.in_body:
            self.fail(HttpDisconnected(_reason(exc, "server disconnected without sending a response")))
        else:
            self.fail(HttpDisconnected(_reason(exc, "peer closed connection without sending complete message body")))

    def close(self) -> None:
        for timer in (self.timer, self.deadline):
            if timer is not None:
                timer.cancel()
        self.timer = self.deadline = None


def _llhttp_reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def _reason(exc: BaseException | None, default: str) -> str:
    return f"{default} ({type(exc).__name__}: {exc})" if exc is not None else default


class _Connection(asyncio.Protocol):
    """One keep-alive socket. Bytes arriving while no request is open make it unusable."""

    def __init__(self, pool: Http1Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.exchange is not None:
            self.exchange.feed(data)
        else:
            self.discard()

    def eof_received(self) -> bool:
        return False  # close our side too: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.exchange is not None:
            self.exchange.lost(exc)

    def discard(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Http1Pool:
    """Keep-alive connections to one origin, for one event loop (no locks: asyncio is one thread).

    `headers` are sent with every request; they may hold a secret, which is why this class keeps
    no repr of them and never puts request bytes into an error text.
    """

    def __init__(self, scheme: str, host: str, port: int | None, *, headers: dict[str, str], connect_timeout_s: float,
                 read_timeout_s: float, tls: ssl.SSLContext | None = None, total_timeout_s: float | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self._host, self._tls = host, (tls or ssl.create_default_context()) if scheme == "https" else None
        self._port = port or (443 if scheme == "https" else 80)
        bracketed = f"[{host}]" if ":" in host else host  # an IPv6 literal
        host_header = bracketed if port is None else f"{bracketed}:{port}"
        fixed = {"Host": host_header, "User-Agent": "kvplan", "Accept": "*/*", "Accept-Encoding": "identity",
                 "Connection": "keep-alive", "Content-Type": "application/json", **headers}
        self._fixed_head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self.connect_timeout_s, self.read_timeout_s = connect_timeout_s, read_timeout_s
        self.total_timeout_s, self.max_response_bytes = total_timeout_s, max_response_bytes
        self._idle: list[_Connection] = []

    def __repr__(self) -> str:
        return f"Http1Pool({self._host}:{self._port})"

    async def open_idle(self, count: int, batch: int = 128) -> int:
        """Open `count` connections ahead of use and keep them idle; returns how many opened.
        Batched, so a server with a small listen backlog does not drop SYNs (a 1 s retransmit).
        Failures are ignored here: the requests that need a connection will meet them again."""
        opened = 0
        for first in range(0, count, batch):
            made = await asyncio.gather(
                *(self._open() for _ in range(min(batch, count - first))), return_exceptions=True
            )
            for conn in made:
                if isinstance(conn, _Connection) and not conn.closed:
                    self._idle.append(conn)
                    opened += 1
        return opened

    async def _connect(self) -> _Connection:
        while self._idle:  # most recently used first: the one least likely to have been closed
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return await self._open()

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(
                lambda: _Connection(self), self._host, self._port, ssl=self._tls,
                server_hostname=self._host if self._tls else None), self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise HttpTimeout(f"ConnectTimeout (no connection within {self.connect_timeout_s:g} s)") from None
        except (OSError, ssl.SSLError) as exc:
            raise HttpConnectError(str(exc) or type(exc).__name__) from None
        return conn

    async def post_stream(self, path: str, body: bytes, extra_headers: dict[str, str], sink: BodySink,
                          on_sent: Callable[[], None] | None = None, on_status: Callable[[int], None] | None = None,
                          on_head: HeadCallback | None = None, total_timeout_s: float | None = None,
                          progress: Callable[[], float] | None = None) -> int:
        """POST `body` and feed the response body to `sink` as it arrives; returns the status code
        once the response has ended. `on_sent` runs just before a connection is taken (so a
        connect counts as latency, as with any client); `on_status` gets the status code before
        the first body byte reaches `sink`, `on_head` the status, reason phrase and headers (texts
        from the server, unmasked: whatever keeps them must mask them)."""
        for value in extra_headers.values():
            if "\r" in value or "\n" in value:
                raise HttpProtocolError("a header value holds a line break")
        head = (f"POST {path} HTTP/1.1\r\n".encode("latin-1") + self._fixed_head
                + "".join(f"{k}: {v}\r\n" for k, v in extra_headers.items()).encode("latin-1")
                + b"Content-Length: %d\r\n\r\n" % len(body))
        if on_sent is not None:
            on_sent()
        conn = await self._connect()
        exchange = conn.exchange = _Exchange(conn, sink, on_status, self.read_timeout_s, on_head,
                                             total_timeout_s or self.total_timeout_s, self.max_response_bytes, progress)
        try:
            if conn.closed or conn.transport is None or conn.transport.is_closing():
                raise HttpDisconnected("the connection closed before the request was sent")
            conn.transport.write(head + body)
            status = await exchange.future
        except BaseException:
            conn.discard()  # mid-response (error, cancel): its remaining bytes would confuse a reuse
            raise
        finally:
            exchange.close()
            conn.exchange = None
        if exchange.keep_alive and not conn.closed:
            self._idle.append(conn)
        else:
            conn.discard()
        return status

    def close(self) -> None:
        for conn in self._idle:
            conn.discard()
        self._idle.clear()
