"""Every read of a target's cold paths (/health, /v1/models, /metrics, the feature probes) is
bounded in bytes and in total time, so a server whose body never ends, or that drips a byte a
second, costs a failed read and never the run's memory or its end. A refusal raises an
`httpx.HTTPError` subclass, so callers that already treat HTTP errors as data need nothing new.
(The streamed requests are bounded the same way in `targets/http1.py` and `targets/openai_stream.py`.)
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

MAX_PROBE_BYTES = 16 * 2**20  # /v1/models of a server with thousands of LoRA adapters stays far below
MAX_METRICS_BYTES = 16 * 2**20  # a vLLM /metrics page is ~100 KB


class ResponseTooLarge(httpx.HTTPError):
    """The server sent more than the read allows."""


class ResponseTooSlow(httpx.TimeoutException):
    """The whole answer did not arrive within the read's total time (each byte may have been prompt)."""


@dataclass(frozen=True)
class BoundedResponse:
    status_code: int
    headers: httpx.Headers
    content: bytes
    is_redirect: bool = False

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


async def bounded_request(client: httpx.AsyncClient, method: str, url: str, *, max_bytes: int, total_s: float,
                          **kwargs: Any) -> BoundedResponse:
    """`client.request(method, url, **kwargs)`, read whole, refused past `max_bytes` (decoded) or
    `total_s` seconds from the request's start."""

    async def read() -> BoundedResponse:
        async with client.stream(method, url, **kwargs) as resp:
            chunks, size = [], 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise ResponseTooLarge(f"{url}: answer larger than {max_bytes:,} bytes")
                chunks.append(chunk)
            return BoundedResponse(resp.status_code, resp.headers, b"".join(chunks), resp.is_redirect)

    try:
        return await asyncio.wait_for(read(), timeout=total_s)
    except asyncio.TimeoutError:
        raise ResponseTooSlow(f"{url}: no complete answer within {total_s:g} s") from None
