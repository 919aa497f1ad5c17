"""The ASGI side of `kvplan serve`'s door: API key, request body deadline and size, JSON errors.

Order (outermost first): Starlette's ServerErrorMiddleware (a JSON 500 through `server_error`),
`ApiKeyMiddleware` (before the body is read, so a client without the key cannot make the server
buffer anything), `BodyLimitMiddleware` (reads the whole body under a deadline and a size cap, then
hands it to the routes), Starlette's ExceptionMiddleware (404/405 as JSON through `http_error`).

Responses sent before the request body was read say `Connection: close`: the unread rest of the
body would otherwise be taken for the next request on the connection, or hold it open.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import sys
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kvplan.server.limits import OPEN_PATHS
from kvplan.server.protocol import ProtocolError


def json_error(
    status: int, message: str, *, close: bool = False, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The OpenAI-shaped error response every 4xx/5xx of the server uses (see ProtocolError.body)."""
    extra = dict(headers or {})
    if close:
        extra["Connection"] = "close"
    return JSONResponse(ProtocolError(status, message).body(), status_code=status, headers=extra)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _may_have_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    return _header(scope, b"transfer-encoding") is not None or (
        length is not None and length.strip() not in (b"", b"0")
    )


def _key_digest(key: bytes) -> bytes:
    """Compared as SHA-256 digests: equal lengths, so compare_digest does not leak the key's length."""
    return hashlib.sha256(key).digest()


class ApiKeyMiddleware:
    """Every route but OPEN_PATHS needs `Authorization: Bearer <key>` (vLLM guards /v1/* only; here a
    route added later is guarded by default). Refusals are 401 in OpenAI's error shape, not vLLM's
    `{"error": "Unauthorized"}`, so that every error of this server parses the same way."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._digest = _key_digest(api_key.encode("ascii"))

    def _check(self, scope: Scope) -> str | None:
        """None when the request may pass, else why not (never echoing what the client sent)."""
        value = _header(scope, b"authorization")
        if value is None:
            return "missing API key: send the header `Authorization: Bearer <key>`"
        scheme, _, token = value.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(_key_digest(token.strip()), self._digest):
            return "incorrect API key provided"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        refusal = self._check(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        response = json_error(401, refusal, close=_may_have_body(scope), headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """Reads each request's body whole, within `timeout_s` of the app first hearing of the request and
    up to `max_bytes` (413 from Content-Length before reading anything, or as soon as a chunked or
    lying body passes the cap); 408 when the deadline passes first, as when a client declares more
    bytes than it sends and then waits. The routes then get the body from memory."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None when the client went away first."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _read_within_deadline(self, receive: Receive) -> bytes | None:
        """asyncio.TimeoutError past the deadline. asyncio.timeout where there is one (3.11+): it costs
        ~10 us a request against ~35 us for wait_for, which wraps the read in a task of its own."""
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(self.timeout_s):
                return await self._read(receive)
        return await asyncio.wait_for(self._read(receive), self.timeout_s)

    def _declared_too_large(self, scope: Scope) -> bool:
        length = _header(scope, b"content-length")
        try:
            return length is not None and int(length) > self.max_bytes
        except ValueError:  # h11 refuses malformed lengths before we get here
            return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"the request body is larger than {self.max_bytes} bytes"
        if self._declared_too_large(scope):
            await json_error(413, too_large, close=True)(scope, receive, send)
            return
        try:
            body = await self._read_within_deadline(receive)
        except _TooLarge:
            await json_error(413, too_large, close=True)(scope, receive, send)
            return
        except asyncio.TimeoutError:
            await json_error(408, f"the request body did not arrive within {self.timeout_s:g} s", close=True)(
                scope, receive, send
            )
            return
        if body is not None:  # else the client is gone: nobody to answer
            await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the routes: the body read already, then the real one (it reports the disconnect
    a streaming response listens for)."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 / 405 (and any HTTPException) as JSON; 405 keeps its `Allow` header."""
    assert isinstance(exc, HTTPException)
    message = f"{exc.detail}: {request.method} {request.url.path}"
    return json_error(exc.status_code, message, headers=dict(exc.headers or {}))


async def server_error(_: Request, __: Exception) -> Response:
    """A bug's 500: no traceback to the client. Starlette re-raises the exception after this answer
    and uvicorn logs it, with its traceback, once ("Exception in ASGI application")."""
    return json_error(500, "internal server error", close=True)


def exception_handlers() -> dict[Any, Any]:
    return {HTTPException: http_error, Exception: server_error}
