"""uvicorn's h11 protocol with the two guards it lacks: a deadline for request headers and a cap on
open connections that half-open clients cannot fill.

Why a protocol subclass: uvicorn's `timeout_keep_alive` runs only between requests (armed when a
response ends, cancelled by the first byte of the next request), so a client that connects and
sends half a request line holds its connection forever, and an ASGI middleware never hears of it:
the app is called once the headers are complete. uvicorn's `limit_concurrency` counts those idle
connections too and answers everybody else 503 once they fill it, which serves the attacker.

Here a connection is *idle* while it has no request in progress (its headers not complete yet, or
kept alive between requests) and *busy* from complete headers to the end of the response (the body
deadline of kvplan.server.middleware bounds the body). An idle connection gets `header_timeout_s`
from its first byte (or from being opened) to complete its headers; past that it is answered 408
(if it sent anything) and closed. Over `max_connections` open connections, the one idle the longest
is closed, so a flood of half-open sockets evicts itself while requests keep being served; when
every connection is busy, the new one is closed at once.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from typing import Any, ClassVar, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from kvplan.server.limits import MAX_HEADER_BYTES, ServeLimits
from kvplan.server.protocol import ProtocolError

log = logging.getLogger("uvicorn.error")
EVICTION_LOG_INTERVAL_S = 10.0  # one warning line per interval, however many connections are closed


def raw_error(status: int, reason: str, message: str) -> bytes:
    """A whole JSON error response, written under h11 (which has not seen a request to answer yet)."""
    body = json.dumps(ProtocolError(status, message).body()).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode("ascii") + body


class ConnectionRegistry:
    """One server's open connections, and those idle in the order they went idle (oldest first)."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self.open: set[GuardedH11Protocol] = set()
        self.idle: OrderedDict[GuardedH11Protocol, None] = OrderedDict()
        self.evicted = 0
        self._evicted_logged = 0
        self._logged_at_s = -EVICTION_LOG_INTERVAL_S

    def add(self, conn: GuardedH11Protocol) -> GuardedH11Protocol | None:
        """Register a new (idle) connection; returns the connection to close when that goes over the cap
        (the oldest idle one, which is `conn` itself when all others are busy)."""
        self.open.add(conn)
        self.idle[conn] = None
        if len(self.open) <= self.max_connections:
            return None
        victim, _ = self.idle.popitem(last=False)
        self.open.discard(victim)
        self.evicted += 1
        return victim

    def mark_busy(self, conn: GuardedH11Protocol) -> None:
        self.idle.pop(conn, None)

    def mark_idle(self, conn: GuardedH11Protocol) -> None:
        if conn in self.open and conn not in self.idle:  # an idle one keeps its place in the queue
            self.idle[conn] = None

    def remove(self, conn: GuardedH11Protocol) -> None:
        self.open.discard(conn)
        self.idle.pop(conn, None)

    def eviction_note(self) -> str | None:
        """A log line about the connections closed over the cap, at most one per interval."""
        now_s = time.monotonic()
        if self.evicted == self._evicted_logged or now_s - self._logged_at_s < EVICTION_LOG_INTERVAL_S:
            return None
        count, self._evicted_logged, self._logged_at_s = self.evicted - self._evicted_logged, self.evicted, now_s
        return (f"kvplan: {count} connection(s) closed over --max-connections {self.max_connections} "
                "(idle the longest first)")


class GuardedH11Protocol(H11Protocol):
    """One connection. `limits` and `registry` are per server: see `guarded_protocol`."""

    limits: ClassVar[ServeLimits]
    registry: ClassVar[ConnectionRegistry]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._partial = False  # bytes of a request whose headers are not complete have arrived
        self._head = b""  # the request head received so far (up to the limit), while headers are incomplete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        victim = self.registry.add(self)
        self._arm_header_timer()
        if victim is not None:
            victim.drop()
            note = self.registry.eviction_note()
            if note:
                log.warning(note)

    def data_received(self, data: bytes) -> None:
        if not self._in_request() and self._head_too_long(data):
            message = f"the request headers are longer than {MAX_HEADER_BYTES:,} bytes"
            self.transport.write(raw_error(431, "Request Header Fields Too Large", message))
            self.registry.remove(self)
            self.transport.close()
            return
        super().data_received(data)
        self._after_io(got_data=True)

    def _head_too_long(self, data: bytes) -> bool:
        """h11 checks its limit only while a head is incomplete: a long head that arrives whole in one
        read passes it. This counts the head's bytes up to the blank line, however they arrive."""
        head = self._head + data[:MAX_HEADER_BYTES + 4]
        end = head.find(b"\r\n\r\n")
        if end >= 0:
            self._head = b""
            return end > MAX_HEADER_BYTES
        self._head = head
        return len(head) > MAX_HEADER_BYTES

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._after_io(got_data=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self.registry.remove(self)
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are not HTTP, as JSON like every other error here."""
        body = json.dumps(ProtocolError(400, msg).body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                      h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def drop(self) -> None:
        """Close now (over the cap): no answer, as a connection refused."""
        self._cancel_header_timer()
        self.registry.remove(self)
        self.transport.close()

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _after_io(self, *, got_data: bool) -> None:
        if self.transport.is_closing():
            return
        if self._in_request():  # headers complete: the body deadline takes over
            self._partial = False
            self._cancel_header_timer()
            self.registry.mark_busy(self)
            return
        self.registry.mark_idle(self)
        if got_data:  # part of the next request; pure idleness is uvicorn's keep-alive timeout
            self._partial = True
            self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        """A deadline from the first byte, not re-armed by each trickled byte (slowloris)."""
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self._in_request():
            return
        if self._partial and self.conn.our_state is h11.IDLE:  # a request began: say why it ends
            message = f"the request headers did not arrive within {self.limits.header_timeout_s:g} s"
            self.transport.write(raw_error(408, "Request Timeout", message))
        self.registry.remove(self)
        self.transport.close()


def guarded_protocol(limits: ServeLimits) -> type[GuardedH11Protocol]:
    """The protocol class for one server (uvicorn makes one instance per connection): its own limits
    and its own registry of connections."""
    registry = ConnectionRegistry(limits.max_connections)
    return cast(type[GuardedH11Protocol], type("GuardedH11Protocol", (GuardedH11Protocol,),
                                               {"limits": limits, "registry": registry}))
