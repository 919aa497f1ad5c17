"""The API key never leaves `kvplan stress --target` in anything it writes or prints, however the
server echoes it: error bodies (the key near the 300-character cut, and in a 100 kB page), an SSE
`error` event, a redirect's `Location`, a status line's reason phrase, a malformed status line,
`/metrics` errors and labels, a model id (in `server_info` and in a probe refusal). Each output file
and the console are searched for the key and for its first 8 characters; each channel is also
checked to have carried the echo (masked), so the search is not vacuous."""
from __future__ import annotations

import asyncio
import itertools
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from server_helpers import ThreadServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from kvplan.cli import main
from kvplan.results.result import load_result
from kvplan.stress.redact import SECRET_MARK, VALUE_MARK, redact
from kvplan.stress.scenario_loader import load_scenario
from kvplan.stress.telemetry import MetricsScraper

KEY = f"sk-SUPER-{uuid.uuid4().hex}"  # 41 characters; its 8-character prefix is "sk-SUPER"
KEY_ENV = "KVPLAN_TEST_SECRET_KEY"
NEAR_CUT = 280  # where an error body puts the key: the old code cut bodies at 300, keeping 20 characters of it
BIG_BODY_CHARS = 100_000


def _near_cut(before: str, after: str = " end", at: int = NEAR_CUT) -> str:
    """`before`, padding, then `key=<KEY>` with the key starting at character `at`, then `after`."""
    return before + "x" * (at - len(before) - len(" key=")) + f" key={KEY}{after}"


def _event(obj: object) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


# --- the echoing server (Starlette + uvicorn) ------------------------------------------------------
COMPLETION_KINDS = ("ok", "near-cut-401", "long-403", "header-500", "sse-error", "redirect-307")
# the first /metrics answer goes to the settings probe before the run (stress --target reads the
# server's pool first): it gets the unparsable one, the run's first scrape the valid labels
METRICS_KINDS = ("unparsable", "valid", "error-500")


def _completion(kind: str, auth: str) -> Response:
    if kind == "near-cut-401":
        return PlainTextResponse(_near_cut("unauthorized:"), status_code=401)
    if kind == "long-403":
        message = _near_cut(f"forbidden for Authorization: {auth};", f" {'y' * BIG_BODY_CHARS} api_key={KEY}",
                            at=NEAR_CUT - len('{"error": {"message": "'))  # the key near 290 of the body
        return JSONResponse({"error": {"message": message, "authorization": auth}}, status_code=403)
    if kind == "header-500":
        return PlainTextResponse(f"internal error\nyour header was\nAuthorization: {auth}\n", status_code=500)
    if kind == "redirect-307":
        return RedirectResponse(f"http://127.0.0.1:9/login?next=/v1&key={KEY}&access_token={KEY}", status_code=307)

    async def stream() -> AsyncIterator[bytes]:
        yield _event({"choices": [{"index": 0, "text": " a", "finish_reason": None}]})
        if kind == "sse-error":
            yield _event({"error": {"message": _near_cut("rate limited:", f" {auth}"), "code": 429}})
            return
        yield _event({"choices": [{"index": 0, "text": " b", "finish_reason": "length"}],
                      "usage": {"completion_tokens": 2}})
        yield b"data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


def _metrics(kind: str, auth: str) -> Response:
    if kind == "valid":  # the server's labels end up in server_info["cache_config"]
        return PlainTextResponse('# TYPE vllm:cache_config_info gauge\n'
                                 f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="128",echo="{auth}"}} 1.0\n')
    if kind == "error-500":
        return PlainTextResponse(f"metrics refused; Authorization: {auth}", status_code=500)
    return PlainTextResponse(f"{auth}\n")  # the parser's error quotes the key: "could not convert ... 'sk-...'"


def echo_app(seen_auth: list[str]) -> Starlette:
    completions_turn, metrics_turn = itertools.count(), itertools.count()

    async def health(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def models(request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        return JSONResponse({"object": "list", "data": [{"id": f"echo {auth}"}, {"id": "plain"}]})

    async def metrics(request: Request) -> Response:
        return _metrics(
            METRICS_KINDS[next(metrics_turn) % len(METRICS_KINDS)], request.headers.get("authorization", "")
        )

    async def completions(request: Request) -> Response:
        auth = request.headers.get("authorization", "")
        seen_auth.append(auth)
        return _completion(COMPLETION_KINDS[next(completions_turn) % len(COMPLETION_KINDS)], auth)

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics),
                             Route("/v1/completions", completions, methods=["POST"])])


# --- status lines uvicorn cannot send: a bare asyncio server ----------------------------------------
def _status_line_answer(path: str, turns: Iterator[int]) -> bytes:
    if path == "/health":
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    if path == "/v1/models":
        body = json.dumps({"object": "list", "data": [{"id": "raw"}]}).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    if path == "/metrics" or next(turns) % 2:  # a reason phrase holding the key, near the cut; no body
        reason = _near_cut("Refused", f" Bearer {KEY}").encode()
        return b"HTTP/1.1 500 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % reason
    # not a status line at all; the old code kept its first 80 characters: 10 of the key's
    return f"HTTP/1.1 ERR {'z' * 57}{KEY} broken\r\nConnection: close\r\n\r\n".encode()


class StatusLineServer:
    """Answers each request on its own connection with bytes of the test's choosing."""

    def __init__(self) -> None:
        self.port = 0
        self.url = ""
        self._turns = itertools.count()  # of completions: they alternate between the two status lines
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in head[1:] if ln)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            writer.write(_status_line_answer(head[0].split(" ")[1], self._turns))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # an idle connection the client opened ahead and closed unused
        finally:
            writer.close()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._ready.set()
        async with server:
            await self._stop.wait()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the status-line server did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


# --- helpers ---------------------------------------------------------------------------------------
@pytest.fixture()
def echo_server() -> Iterator[tuple[ThreadServer, list[str]]]:
    seen_auth: list[str] = []
    server = ThreadServer(echo_app(seen_auth))
    server.start()
    try:
        yield server, seen_auth
    finally:
        server.stop()


@pytest.fixture()
def status_line_server() -> Iterator[StatusLineServer]:
    server = StatusLineServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _stress(tmp_path: Path, url: str, out: Path, *extra: str) -> int:
    """`kvplan stress --target url` on 12 ci-smoke requests; its exit code."""
    data = load_scenario("ci-smoke").to_dict()
    data.update(num_requests=12, warmup_requests=0, arrival={"type": "concurrency", "concurrency": 3})
    path = tmp_path / "secrets.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as info:
        main(["stress", "-s", str(path), "--target", url, "--api-key-env", KEY_ENV, "--out", str(out), "--no-progress",
              "--timeout-s", "10", *extra])
    return int(info.value.code or 0)


def _leaks(texts: dict[str, str]) -> list[str]:
    """Where the key or its 8-character prefix appears."""
    return [f"{name}: {needle!r}" for name, text in texts.items() for needle in (KEY, KEY[:8]) if needle in text]


def _outputs(out: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    captured = capsys.readouterr()
    texts = {"stdout": captured.out, "stderr": captured.err, "log": caplog.text}
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files, f"nothing written under {out}"
    texts.update({str(p.relative_to(out)): p.read_bytes().decode("latin-1") for p in files})
    return texts


# --- the tests -------------------------------------------------------------------------------------
def test_key_echoed_everywhere_is_never_written_or_printed(
    echo_server, tmp_path: Path, monkeypatch, capsys, caplog
) -> None:
    server, seen_auth = echo_server
    monkeypatch.setenv(KEY_ENV, KEY)
    out = tmp_path / "run"
    assert _stress(tmp_path, server.url, out) == 1  # most requests fail: the run says FAILED
    assert f"Bearer {KEY}" in seen_auth  # the key reached the server, which echoed it back
    texts = _outputs(out, capsys, caplog)
    assert not _leaks(texts)
    result = load_result(out / "result.json")
    errors = {r["error"].split(":", 1)[0]: r["error"] for r in result.requests if r["status"] == "error"}
    assert set(errors) == {"http 401", "http 403", "http 500", "server error", "http 307"}
    assert all(SECRET_MARK in e for e in errors.values()), errors  # each echo arrived and was masked
    assert "redirected to http://127.0.0.1:9/login?next=/v1&key=***&access_token=***" in errors["http 307"]
    assert all(len(r["error"] or "") <= 300 for r in result.requests)
    info = result.server_info
    assert info["model"] == f"echo Bearer {SECRET_MARK}" and info["cache_config"]["echo"] == f"Bearer {SECRET_MARK}"
    assert SECRET_MARK in info["metrics_last_error"]
    assert "FAILED" in texts["stdout"] and SECRET_MARK in texts["stdout"]


def test_probe_refusal_quoting_the_key_is_masked(echo_server, tmp_path: Path, monkeypatch, capsys, caplog) -> None:
    server, _ = echo_server
    monkeypatch.setenv(KEY_ENV, KEY)
    out = tmp_path / "probe"
    out.mkdir()
    assert _stress(tmp_path, server.url, out, "--served-model-name", "nope") == 2
    texts = _outputs(tmp_path, capsys, caplog)
    assert not _leaks(texts)
    assert f"it serves: echo Bearer {SECRET_MARK}, plain" in " ".join(texts["stdout"].split() + texts["stderr"].split())


def test_status_lines_holding_the_key_are_masked(
    status_line_server, tmp_path: Path, monkeypatch, capsys, caplog
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    out = tmp_path / "run"
    assert _stress(tmp_path, status_line_server.url, out) == 1
    texts = _outputs(out, capsys, caplog)
    assert not _leaks(texts)
    result = load_result(out / "result.json")
    errors = {r["error"].split(":", 1)[0]: r["error"] for r in result.requests if r["status"] == "error"}
    assert set(errors) == {"http 500", "protocol"} and SECRET_MARK in errors["http 500"], errors
    # llhttp names what is wrong without quoting the line: nothing of the server's to mask there
    assert errors["protocol"] == "protocol: not valid HTTP/1.1: Invalid status code"
    assert result.server_info["metrics_last_error"] == "ValueError: HTTP 500"  # httpx: the reason phrase is not kept


def test_metrics_errors_are_masked(echo_server) -> None:
    """Each /metrics answer in turn: a valid page, a 500 quoting the header, an unparsable echo."""
    server, _ = echo_server

    async def scrape() -> list[str | None]:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as client:
            scraper = MetricsScraper(client, f"{server.url}/metrics", lambda: 0.0, secrets=(KEY,))
            errors = []
            for _ in METRICS_KINDS:
                before = scraper.num_errors
                await scraper.scrape_once()
                errors.append(scraper.last_error if scraper.num_errors > before else None)
            return errors

    unparsable, valid, refused = asyncio.run(scrape())  # METRICS_KINDS' order
    assert valid is None
    assert refused == f"ValueError: HTTP 500: metrics refused; Authorization: Bearer {SECRET_MARK}"
    assert unparsable is not None and SECRET_MARK in unparsable and not _leaks({"error": unparsable})


@pytest.mark.parametrize("text, expected", [
    (f"Authorization: Bearer {KEY}", f"Authorization: Bearer {SECRET_MARK}"),
    ("Authorization: Bearer abc.def-ghi", f"Authorization: Bearer {VALUE_MARK}"),
    ('{"Authorization": "Basic dXNlcjpwYXNz"}', f'{{"Authorization": "Basic {VALUE_MARK}"}}'),
    ("x-api-key: abc123", f"x-api-key: {VALUE_MARK}"),
    ("GET /v1?key=abc&api_key=def&token=ghi&access_token=jkl&max_tokens=5",
     f"GET /v1?key={VALUE_MARK}&api_key={VALUE_MARK}&token={VALUE_MARK}&access_token={VALUE_MARK}&max_tokens=5"),
    ('{"api_key": "abc", "monkey": "ok"}', f'{{"api_key": "{VALUE_MARK}", "monkey": "ok"}}'),
    ("via http://user:pw@proxy:3128/", f"via http://{VALUE_MARK}@proxy:3128/"),
    (f"echoed a prefix {KEY[:12]}... of it", f"echoed a prefix {SECRET_MARK}... of it"),
    ("send the header `Authorization: Bearer <key>`", "send the header `Authorization: Bearer <key>`"),
], ids=lambda v: v.replace(KEY, "KEY").replace(KEY[:12], "KEY-PREFIX") if isinstance(v, str) else None)
def test_redact_patterns(text: str, expected: str) -> None:
    assert redact(text, [KEY]) == expected


def test_redact_masks_before_it_cuts() -> None:
    cut = redact("x" * 290 + KEY, [KEY], max_chars=300)  # cut first, 10 characters of the key would stay
    assert cut == "x" * 290 + SECRET_MARK
    assert not _leaks({"raw prefix": redact(f"end of a body cut by the server: {KEY[:9]}", [KEY])})
