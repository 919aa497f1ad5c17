"""A minimal HTTP/1.1 client for the load generator's hot path: streamed POSTs over keep-alive
connections, with the response body handed to a callback straight from `data_received`.

Why not httpx here: with httpx every socket read wakes the request's task and walks anyio, httpcore
and h11 (~20 us of CPU per streamed chunk), so one process saturates a core near 250 streams and
the queueing shows up as latency the server never caused. Here a read costs one callback, one
chunked-framing step and the caller's own parsing; the request's task sleeps until the response
ends. httpx still does the cold paths (probe, /metrics).

Supported: `Transfer-Encoding: chunked`, `Content-Length` and read-until-close bodies, keep-alive
(a connection is reused only after a cleanly framed response with no `Connection: close`), TLS
through asyncio's SSL transport, 1xx interim responses. No proxies (the old client ignored the
environment too), no compression (we ask for `identity` and refuse anything else).

Failures are exceptions, one class per error kind the HTTP target records: `HttpConnectError`,
`HttpTimeout` (no byte for `read_timeout_s`, or a connect slower than `connect_timeout_s`),
`HttpDisconnected` (the peer closed or reset the connection before the response ended) and
`HttpProtocolError` (a response that is not valid HTTP/1.1). An exception raised by the body
callback ends the request with that exception and discards the connection.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable

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


# parser states of one response
_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class _Exchange:
    """One request/response on one connection: framing state, read timeout, completion future."""

    __slots__ = ("conn", "sink", "on_status", "on_head", "future", "state", "buf", "remaining", "status", "keep_alive",
                 "last_read_s", "timeout_s", "timer", "deadline", "received", "max_bytes", "progress")

    def __init__(self, conn: _Connection, sink: BodySink, on_status: Callable[[int], None] | None, timeout_s: float,
                 on_head: HeadCallback | None = None, total_timeout_s: float | None = None,
                 max_bytes: int = MAX_RESPONSE_BYTES, progress: Callable[[], float] | None = None) -> None:
        self.conn = conn
        self.sink = sink
        self.on_status = on_status
        self.on_head = on_head
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.state = _HEAD
        self.buf = b""
        self.remaining = 0
        self.status = 0
        self.keep_alive = True
        self.timeout_s = timeout_s
        self.last_read_s = time.perf_counter()
        # one timer per request, re-armed only when it fires (not on every read): cheap at any rate
        self.timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(timeout_s, self._check_timeout)
        # the whole answer's time, whatever the gaps: a server that drips or streams forever ends here
        self.deadline: asyncio.TimerHandle | None = None if total_timeout_s is None else \
            asyncio.get_running_loop().call_later(total_timeout_s, self.fail, HttpTimeout(
                f"TotalTimeout (the answer did not end within {total_timeout_s:g} s)"))
        self.received, self.max_bytes = 0, max_bytes
        # when the answer last made progress (perf_counter; 0: not yet): the caller's notion (a whole
        # SSE event), so bytes that never complete one do not keep the request alive
        self.progress = progress

    def _check_timeout(self) -> None:
        last = self.progress() if self.progress is not None else 0.0
        idle_s = time.perf_counter() - (last or self.last_read_s)
        if idle_s >= self.timeout_s * 0.999:
            self.timer = None
            self.fail(HttpTimeout(f"ReadTimeout (no {'progress' if last else 'data'} for {self.timeout_s:g} s)"))
        else:
            self.timer = asyncio.get_running_loop().call_later(self.timeout_s - idle_s, self._check_timeout)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)
        self.conn.discard()

    def finish(self) -> None:
        self.state = _DONE
        if not self.future.done():
            self.future.set_result(self.status)

    def feed(self, data: bytes) -> None:
        now_s = self.last_read_s = time.perf_counter()  # the stamp of every event in these bytes
        self.received += len(data)
        if self.received > self.max_bytes:
            self.fail(HttpProtocolError(f"answer larger than {self.max_bytes:,} bytes"))
            return
        buf = self.buf + data if self.buf else data
        try:
            pos = self._parse(buf, now_s)
        except Exception as exc:  # noqa: BLE001 - bad framing, or the sink's verdict (bad JSON, error event)
            self.fail(exc)
            return
        self.buf = buf[pos:] if pos < len(buf) else b""
        if self.state == _DONE and self.buf:  # bytes after the response: not a connection to reuse
            self.keep_alive = False

    def _parse(self, buf: bytes, now_s: float) -> int:
        """Consume what `buf` holds; returns how far it got (the rest waits for more bytes)."""
        pos, end = 0, len(buf)
        while pos < end or self.state == _DONE:
            state = self.state
            if state == _DATA:  # the hot path: a chunk's payload
                take = min(self.remaining, end - pos)
                self.sink(buf[pos:pos + take] if (pos or take != end) else buf, now_s)
                pos += take
                self.remaining -= take
                if self.remaining:
                    return pos
                self.state = _CRLF
            elif state == _CRLF:
                if end - pos < 2:
                    return pos
                if buf[pos:pos + 2] != b"\r\n":
                    raise HttpProtocolError("malformed chunked body (no CRLF after a chunk)")
                pos += 2
                self.state = _SIZE
            elif state == _SIZE:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    if end - pos > 1024:
                        raise HttpProtocolError("malformed chunked body (chunk size line too long)")
                    return pos
                try:
                    size = int(buf[pos:nl].split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise HttpProtocolError("malformed chunked body (bad chunk size)") from None
                pos = nl + 2
                self.remaining = size
                self.state = _DATA if size else _TRAILER
            elif state == _TRAILER:
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    return pos
                self.state = _DONE if nl == pos else _TRAILER  # an empty line ends the trailers
                pos = nl + 2
            elif state == _LENGTH:
                take = min(self.remaining, end - pos)
                self.sink(buf[pos:pos + take], now_s)
                pos += take
                self.remaining -= take
                if self.remaining:
                    return pos
                self.state = _DONE
            elif state == _UNTIL_CLOSE:
                self.sink(buf[pos:], now_s)
                return end
            elif state == _HEAD:
                head_end = self._head(buf, pos)
                if head_end == pos:  # the head is not all here yet
                    return pos
                pos = head_end  # a final head, or an interim (1xx) one: parse on either way
            else:  # _DONE
                self.finish()
                return pos
        return pos

    def _head(self, buf: bytes, pos: int) -> int:
        cut = buf.find(b"\r\n\r\n", pos)
        if cut < 0:
            if len(buf) - pos > MAX_HEAD_BYTES:
                raise HttpProtocolError("response head too long")
            return pos
        lines = buf[pos:cut].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise HttpProtocolError(f"not an HTTP/1.x response: {lines[0]!r}")  # uncut: the caller masks, then cuts
        status = int(code)
        if 100 <= status < 200:  # an interim response (100 Continue): the real one follows
            return cut + 4
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpProtocolError("malformed response header line")
            name = name.strip().lower()
            headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
        self.status = status
        if self.on_status is not None:
            self.on_status(status)
        if self.on_head is not None:
            self.on_head(status, rest[3:].strip(), headers)
        connection = headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", ""):
            raise HttpProtocolError(f"unsupported content-encoding {encoding!r} (identity was asked for)")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.state = _SIZE
        elif status in (204, 304):
            self.state = _DONE
        elif "content-length" in headers:
            try:
                self.remaining = int(headers["content-length"])
            except ValueError:
                raise HttpProtocolError("bad content-length") from None
            self.state = _LENGTH if self.remaining else _DONE
        else:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False
        return cut + 4

    def lost(self, exc: BaseException | None) -> None:
        if self.state == _UNTIL_CLOSE:  # the close is what ends such a body
            self.finish()
        elif self.state == _HEAD:
            self.fail(HttpDisconnected(_reason(exc, "server disconnected without sending a response")))
        elif self.state != _DONE:
            self.fail(HttpDisconnected(_reason(exc, "peer closed connection without sending complete message body")))

    def close(self) -> None:
        for timer in (self.timer, self.deadline):
            if timer is not None:
                timer.cancel()
        self.timer = self.deadline = None


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
            raise HttpTimeout(f"ConnectTimeout (no data for {self.read_timeout_s:g} s)") from None
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
