"""`kvplan serve` has a door: API key, JSON errors everywhere, request size, depth and time limits, and a
connection cap that half-open clients cannot fill.

Real servers: the session one (no key, default limits) and `secured_servers` (conftest): one with
`--api-key` and short deadlines, one keyed by KVPLAN_API_KEY alone. Every socket goes to 127.0.0.1,
every wait is bounded by a socket or HTTP timeout.
"""
from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import typer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from kvplan.cli import app as cli_app
from kvplan.errors import KvplanError
from kvplan.server.connection import ConnectionRegistry
from kvplan.server.limits import ServeLimits, exposure_warning, is_loopback, raise_open_file_limit
from kvplan.server.middleware import exception_handlers
from kvplan.server.protocol import ProtocolError, bracket_depth, parse_json_body

KEY = "unit-test-key"
COMPLETION = {"model": "tiny", "prompt": [11, 12, 13], "max_tokens": 2, "temperature": 0}
WAIT_S = 30.0  # the bound on any one wait for the server (far above the 2 s deadlines under test)
FLOOD = 1000


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _assert_error(r: httpx.Response, status: int) -> dict:
    """OpenAI's error object, as every other error of kvplan serve (protocol.ProtocolError)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    error = r.json()["error"]
    assert error["code"] == status and isinstance(error["message"], str) and error["type"]
    assert "Traceback" not in r.text
    return error


def _raw_exchange(port: int, data: bytes) -> bytes:
    """Send `data`, then read until the server closes (bounded by WAIT_S)."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def _split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


# --- 1. the API key ------------------------------------------------------------------------------
def test_api_key_flag_guards_the_api_and_wins_over_the_env_var(secured_servers) -> None:
    url, key = secured_servers.flag.url, secured_servers.flag_key
    refused = ({}, _bearer("wrong"), {"Authorization": key}, _bearer(secured_servers.env_key))  # env key: the flag wins
    for headers in refused:
        error = _assert_error(
            httpx.post(f"{url}/v1/completions", json=COMPLETION, headers=headers, timeout=WAIT_S), 401
        )
        assert error["type"] == "AuthenticationError" and key not in json.dumps(error)
        _assert_error(httpx.get(f"{url}/v1/models", headers=headers, timeout=WAIT_S), 401)
        _assert_error(httpx.post(f"{url}/v1/chat/completions", json={}, headers=headers, timeout=WAIT_S), 401)
    assert httpx.get(f"{url}/v1/models", headers=_bearer(key), timeout=WAIT_S).json()["data"][0]["id"] == "tiny"
    r = httpx.post(f"{url}/v1/completions", json=COMPLETION, headers=_bearer(key), timeout=WAIT_S)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
    # open without the key: load balancers probe /health, and vLLM leaves /metrics open too
    assert httpx.get(f"{url}/health", timeout=WAIT_S).status_code == 200
    assert "vllm:num_requests_running" in httpx.get(f"{url}/metrics", timeout=WAIT_S).text


def test_api_key_from_env_var(secured_servers) -> None:
    url = secured_servers.env.url
    _assert_error(httpx.post(f"{url}/v1/completions", json=COMPLETION, timeout=WAIT_S), 401)
    _assert_error(httpx.get(f"{url}/v1/models", headers=_bearer(secured_servers.flag_key), timeout=WAIT_S), 401)
    assert httpx.get(f"{url}/v1/models", headers=_bearer(secured_servers.env_key), timeout=WAIT_S).status_code == 200
    r = httpx.post(f"{url}/v1/completions", json=COMPLETION, headers=_bearer(secured_servers.env_key), timeout=WAIT_S)
    assert r.status_code == 200, r.text


def test_the_key_is_never_logged(secured_servers) -> None:
    httpx.get(f"{secured_servers.flag.url}/v1/models", headers=_bearer("not-the-key"), timeout=WAIT_S)
    for server in (secured_servers.flag, secured_servers.env):
        log = server.log_path.read_text()
        assert "auth=api-key" in log
        assert secured_servers.flag_key not in log and secured_servers.env_key not in log and "not-the-key" not in log
    assert KEY not in repr(ServeLimits(api_key=KEY))


# --- 2. JSON errors everywhere -------------------------------------------------------------------
def test_unknown_route_and_wrong_method_answer_json(kvplan_server, secured_servers) -> None:
    for url, headers in ((kvplan_server.url, {}), (secured_servers.flag.url, _bearer(secured_servers.flag_key))):
        assert (
            _assert_error(httpx.get(f"{url}/no/such/route", headers=headers, timeout=WAIT_S), 404)["type"]
            == "NotFoundError"
        )
        r = httpx.get(f"{url}/v1/completions", headers=headers, timeout=WAIT_S)
        assert _assert_error(r, 405)["type"] == "MethodNotAllowedError" and r.headers["allow"] == "POST"
        _assert_error(httpx.post(f"{url}/health", headers=headers, timeout=WAIT_S), 405)


def test_bytes_that_are_not_http_answer_json(kvplan_server) -> None:
    status, headers, body = _split_response(_raw_exchange(kvplan_server.port, b"\x00\x01 not http\r\n\r\n"))
    assert status == 400 and headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == 400


def test_a_bug_is_a_json_500_without_traceback() -> None:
    async def boom(_: Request) -> Response:
        raise RuntimeError("secret internals")

    app = Starlette(routes=[Route("/boom", boom)], exception_handlers=exception_handlers())
    r = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert _assert_error(r, 500)["type"] == "InternalServerError"  # type: ignore[arg-type]
    assert "secret internals" not in r.text


# --- 3. request body limits ----------------------------------------------------------------------
def test_deep_nesting_is_a_400_and_the_server_keeps_serving(kvplan_server) -> None:
    depth = 100_000
    body = b'{"model": "tiny", "prompt": ' + b"[" * depth + b"]" * depth + b"}"
    for path in ("/v1/completions", "/v1/chat/completions"):
        r = httpx.post(f"{kvplan_server.url}{path}", content=body, headers={"content-type": "application/json"},
                       timeout=WAIT_S)
        assert "nests deeper" in _assert_error(r, 400)["message"]
    assert httpx.get(f"{kvplan_server.url}/health", timeout=WAIT_S).status_code == 200
    assert httpx.post(f"{kvplan_server.url}/v1/completions", json=COMPLETION, timeout=WAIT_S).status_code == 200


def test_a_body_over_the_limit_is_a_413(secured_servers) -> None:
    url, auth = secured_servers.flag.url, _bearer(secured_servers.flag_key)
    big = b"x" * (secured_servers.max_request_bytes + 1)
    r = httpx.post(f"{url}/v1/completions", content=big, headers=auth, timeout=WAIT_S)  # Content-Length says so
    assert _assert_error(r, 413)["type"] == "RequestTooLargeError"

    def chunks() -> Iterator[bytes]:  # no Content-Length: caught while the body streams in
        for _ in range(secured_servers.max_request_bytes // 65536 + 1):
            yield b"x" * 65536

    _assert_error(httpx.post(f"{url}/v1/completions", content=chunks(), headers=auth, timeout=WAIT_S), 413)
    assert httpx.get(f"{url}/health", timeout=WAIT_S).status_code == 200


@pytest.mark.parametrize("declared", [True, False])
def test_a_100_mb_body_is_a_413_not_a_reset(kvplan_server, declared: bool) -> None:
    """The client is still sending when the server knows the answer: the server reads the rest
    (within --body-timeout-s) before it answers and closes, so the client reads a 413, not a
    connection reset (as nginx's lingering close)."""
    url, auth = kvplan_server.url, {}
    piece = b"x" * 2**20

    def chunks() -> Iterator[bytes]:
        for _ in range(100):
            yield piece

    body = piece * 100 if declared else chunks()
    _assert_error(httpx.post(f"{url}/v1/completions", content=body, headers=auth, timeout=WAIT_S), 413)


def test_a_lying_content_length_is_a_408(secured_servers) -> None:
    """Declares 1000 bytes, sends 10, then waits: answered 408 by --body-timeout-s, then closed."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secured_servers.flag_key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    status, headers, body = _split_response(_raw_exchange(secured_servers.flag.port, head.encode() + b'{"prompt":'))
    assert status == 408 and headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert (
        error["code"] == 408
        and error["type"] == "RequestTimeoutError"
        and f"{secured_servers.timeout_s:g} s" in error["message"]
    )
    assert httpx.get(f"{secured_servers.flag.url}/health", timeout=WAIT_S).status_code == 200


def test_unauthenticated_bodies_are_not_read(secured_servers) -> None:
    """A 401 comes before the body: the declared megabyte is never awaited, the connection is closed."""
    head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n"
    status, headers, _ = _split_response(_raw_exchange(secured_servers.flag.port, head.encode()))
    assert status == 401 and headers["connection"] == "close"


# --- 4. connections ------------------------------------------------------------------------------
@pytest.fixture()
def open_file_limit() -> Iterator[None]:
    """Soft RLIMIT_NOFILE up to the hard limit for the flood, restored afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FLOOD + 256
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the hard open-file limit ({hard}) is below {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, want), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _let_go(sock: socket.socket, deadline_s: float) -> bytes | None:
    """What the server sent before closing `sock` (b"" for a plain close or reset), None if it kept it open."""
    sock.settimeout(max(0.1, deadline_s - time.monotonic()))
    out = b""
    try:
        while chunk := sock.recv(4096):
            out += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:  # socket.timeout
        return None
    return out


def test_half_open_connections_do_not_lock_others_out(secured_servers, open_file_limit: None) -> None:
    """1000 sockets each holding half a request: /health and an authenticated completion are still
    served, and the server lets every one of the 1000 go (closed over --max-connections, or answered
    408 by --header-timeout-s)."""
    server = secured_servers.flag
    partial = (
        b"GET /heal",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        b"POST /v1/completions HTTP/1.1\r\nContent-Le",
    )
    socks: list[socket.socket] = []
    try:
        for i in range(FLOOD):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)
            socks.append(sock)
            try:
                sock.sendall(partial[i % len(partial)])
            except (ConnectionResetError, BrokenPipeError):
                pass  # evicted already
        assert httpx.get(f"{server.url}/health", timeout=5.0).status_code == 200
        r = httpx.post(
            f"{server.url}/v1/completions", json=COMPLETION, headers=_bearer(secured_servers.flag_key), timeout=WAIT_S
        )
        assert r.status_code == 200, r.text
        deadline_s = time.monotonic() + WAIT_S
        endings = [_let_go(sock, deadline_s) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert all(e is not None for e in endings), f"{sum(e is None for e in endings)} half-open connections still open"
    answered = [e for e in endings if e]  # the last ones in were never evicted: they met --header-timeout-s
    assert answered
    status, headers, body = _split_response(answered[0])
    assert status == 408 and headers["content-type"] == "application/json" and json.loads(body)["error"]["code"] == 408
    assert f"closed over --max-connections {secured_servers.max_connections}" in server.log_path.read_text()
    assert httpx.get(f"{server.url}/health", timeout=5.0).status_code == 200


class _Conn:
    """Stands in for a connection in ConnectionRegistry (it only hashes them)."""


def test_registry_evicts_the_longest_idle_and_never_a_busy_connection() -> None:
    reg = ConnectionRegistry(max_connections=2)
    a, b, c, d = _Conn(), _Conn(), _Conn(), _Conn()
    assert reg.add(a) is None and reg.add(b) is None  # type: ignore[arg-type]
    reg.mark_busy(a)  # type: ignore[arg-type]
    assert reg.add(c) is b  # type: ignore[arg-type]  # a is busy: b is the longest idle
    reg.mark_busy(c)  # type: ignore[arg-type]
    assert reg.add(d) is d  # type: ignore[arg-type]  # everyone else busy: the newcomer goes
    reg.mark_idle(a)  # type: ignore[arg-type]
    reg.remove(c)  # type: ignore[arg-type]
    assert reg.open == {a} and list(reg.idle) == [a]


# --- 5. flags, warnings, parsing (no server) ------------------------------------------------------
def test_serve_flags_and_their_defaults() -> None:
    command = typer.main.get_command(cli_app).commands["serve"]  # type: ignore[attr-defined]
    params = {p.name: p for p in command.params}
    assert params["api_key"].envvar == "KVPLAN_API_KEY" and params["api_key"].default is None
    defaults = ServeLimits()
    for name in ("header_timeout_s", "body_timeout_s", "max_request_bytes", "max_connections"):
        assert params[name].default == getattr(defaults, name), name


@pytest.mark.parametrize("args, word", [
    (["--api-key", ""], "must not be empty"),
    (["--api-key", "has a space"], "printable ASCII"),
    (["--body-timeout-s", "0"], "--body-timeout-s"),
    (["--max-connections", "0"], "--max-connections"),
    (["--api-key-file", "/nonexistent/key"], "no such API key file"),
])
def test_bad_door_flags_exit_2_in_one_line(args: list[str], word: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "kvplan", "serve", "--model", "tiny-llama", *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0] and "has a space" not in lines[0]


def test_api_key_file_reads_the_first_line_and_checks_it(tmp_path) -> None:
    from kvplan.server.limits import read_api_key_file

    good = tmp_path / "key"
    good.write_text(f"{KEY}\nsecond line ignored\n")
    assert read_api_key_file(good) == KEY
    for text, word in (("\n", "first line is empty"), ("has a space\n", "printable ASCII")):
        good.write_text(text)
        with pytest.raises(KvplanError, match=word) as info:
            read_api_key_file(good)
        assert "has a space" not in str(info.value)
    with pytest.raises(KvplanError, match="no such API key file"):
        read_api_key_file(tmp_path / "missing")


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
                                            ("localhost", True), ("0.0.0.0", False), ("::", False),
                                            ("10.1.2.3", False), ("example.org", False)])
def test_exposure_warning_only_for_keyless_non_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    line = exposure_warning(host, ServeLimits())
    assert (line is None) is loopback
    if line:
        assert "unauthenticated" in line and "beyond this machine" in line
    assert exposure_warning(host, ServeLimits(api_key=KEY)) is None


def test_startup_prints_the_warning_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    from kvplan.server.serve import _startup_warnings

    _startup_warnings("0.0.0.0", ServeLimits(max_connections=8))
    _startup_warnings("127.0.0.1", ServeLimits(max_connections=8))
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "WARNING" in lines[0] and "0.0.0.0" in lines[0]


def test_json_depth_limit() -> None:
    assert isinstance(parse_json_body(b'{"a": ' + b"[" * 63 + b"]" * 63 + b"}", 64)["a"], list)  # 64 deep: fine
    assert parse_json_body(b'{"prompt": "' + b"[" * 500 + b'"}', 64) == {"prompt": "[" * 500}  # brackets in a string
    assert parse_json_body(b'{"p": "\\"' + b"{" * 500 + b'"}', 64) == {
        "p": '"' + "{" * 500
    }  # ... after an escaped quote
    assert parse_json_body(b"[" + b"[1]," * 500 + b"[1]]", 64)[0] == [1]  # wide, not deep
    assert bracket_depth(b'{"a": "[[[", "b": [[1], {"c": []}]}') == 4
    for depth in (65, 900, 100_000):
        with pytest.raises(ProtocolError, match="nests deeper than 64") as info:
            parse_json_body(b'{"a": ' + b"[" * depth + b"]" * depth + b"}", 64)
        assert info.value.status == 400
    with pytest.raises(ProtocolError, match="not valid JSON"):
        parse_json_body(b'{"a": \xff}', 64)


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(KvplanError):
        ServeLimits(header_timeout_s=float("nan"))
    with pytest.raises(KvplanError):
        ServeLimits(max_request_bytes=10)


def test_open_file_limit_is_raised_for_the_connection_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "setrlimit", lambda _which, limits: set_to.append(limits))
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 1_000_000))
    assert raise_open_file_limit(4096) is None and set_to == [(4096 + 1024, 1_000_000)]
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 2048))  # the hard limit is too low: say so
    line = raise_open_file_limit(4096)
    assert set_to[-1] == (2048, 2048) and line is not None and "--max-connections" in line
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1_000_000, 1_000_000))
    assert raise_open_file_limit(4096) is None and len(set_to) == 2  # high enough already: left alone


# --- 4. issue 29: what used to be a 500 or was let through -------------------------------------------
def test_a_lone_surrogate_is_a_400_and_a_pair_is_text(kvplan_server) -> None:
    """JSON's \\ud800 escape alone is not Unicode (it was a 500 with a traceback); a pair is an emoji."""
    for path, body in (("/v1/completions", b'{"model": "tiny", "prompt": "\\ud800 hi", "max_tokens": 2}'),
                       ("/v1/chat/completions",
                        b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\udfff"}], "max_tokens": 2}')):
        r = httpx.post(f"{kvplan_server.url}{path}", content=body, headers={"content-type": "application/json"},
                       timeout=WAIT_S)
        assert "surrogate" in _assert_error(r, 400)["message"]
    ok = httpx.post(f"{kvplan_server.url}/v1/completions", content=b'{"model": "tiny", "prompt": "\\ud83d\\ude00 hi", '
                    b'"max_tokens": 2}', headers={"content-type": "application/json"}, timeout=WAIT_S)
    assert ok.status_code == 200, ok.text


def test_a_top_p_that_underflows_samples_the_likeliest_token(kvplan_server) -> None:
    """top_p 1e-320 is in vLLM's range (0, 1] but times a float32 sum is 0: the likeliest token stays."""
    body = {**COMPLETION, "top_p": 1e-320, "temperature": 1.0}
    r = httpx.post(f"{kvplan_server.url}/v1/completions", json=body, timeout=WAIT_S)
    assert r.status_code == 200, r.text


def test_headers_over_16_kib_are_a_431_even_in_one_read(kvplan_server) -> None:
    """h11 checks its limit only while a head is incomplete; a 100 KB head sent at once passed."""
    body = json.dumps(COMPLETION).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Big: " + b"a" * 100_000
            + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    status, _, answer = _split_response(_raw_exchange(kvplan_server.port, head + body))
    assert status == 431 and "16,384" in json.loads(answer)["error"]["message"]
    small = head.replace(b"a" * 100_000, b"a" * 10_000)
    with socket.create_connection(("127.0.0.1", kvplan_server.port), timeout=WAIT_S) as sock:
        sock.sendall(small + body)
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
