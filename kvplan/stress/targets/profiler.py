"""vllm bench serve's --profile: the server's torch profiler started before the measured requests
(POST /start_profile) and stopped after them (POST /stop_profile), as vLLM's client does; the
server writes the trace where its --profiler-config says. An answer other than 2xx is a note, not
a failure: vLLM's client prints "Profiler started" only on success and runs the load either way."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx


async def profiler_call(http: httpx.AsyncClient, base: str, action: str, timeout_s: float) -> str:
    """POST {base}/{action}_profile; one line saying what the server answered."""
    try:
        response = await http.post(f"{base}/{action}_profile", timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"--profile: POST /{action}_profile failed ({type(exc).__name__})"
    if 200 <= response.status_code < 300:
        return f"--profile: the server's profiler {'started' if action == 'start' else 'stopped'}"
    return (f"--profile: POST /{action}_profile answered {response.status_code} (vLLM serves it only with "
            "--profiler-config)")


@contextlib.asynccontextmanager
async def profiled(http: httpx.AsyncClient, base: str, timeout_s: float, enabled: bool) -> AsyncIterator[list[str]]:
    """The profiler started on entry and stopped on exit when `enabled`; yields the notes, filled on exit."""
    notes = [await profiler_call(http, base, "start", timeout_s)] if enabled else []
    try:
        yield notes
    finally:
        if enabled:
            notes.append(await profiler_call(http, base, "stop", timeout_s))
