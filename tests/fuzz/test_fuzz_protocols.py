"""Generated hostile input for the two network sides, in-process: request bodies for `kvplan serve`
(parse, validate, sampling parameters) and SSE streams from a target for `kvplan stress --target`
(split, parse, count). Whatever the bytes, only the errors each side answers with escape: a 4xx
`ProtocolError` (or `KvplanError`) for serve, a protocol/server error that fails the request as data
for stress; and numbers a target reports are kept only when they are token counts."""
from __future__ import annotations

import json

import pytest
from harness import CASES, FUZZ, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.errors import KvplanError
from kvplan.server.protocol import ProtocolError, parse_json_body, parse_request
from kvplan.server.tokenizer import WordTokenizer
from kvplan.stress.targets.http1 import HttpProtocolError
from kvplan.stress.targets.openai_stream import MAX_REPORTED_TOKENS, Progress, ServerError, StreamClient
from kvplan.workload.request import Request

pytestmark = pytest.mark.slow  # the slow lane (pytest -m slow): .ci/run runs it after the default lane

NUMBERS = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.just(1e-320),
                    st.just(10**400), st.booleans())
TEXT = st.one_of(st.text(max_size=40), st.sampled_from(["\ud800", "t11 t12", "", "\x00", "ü" * 20]))
SCALARS = st.one_of(st.none(), NUMBERS, TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)
KEYS = ["model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
        "seed", "stream", "stream_options", "n", "stop", "ignore_eos", "logprobs", "role", "content"]


def _dump(body: object) -> bytes:
    return json.dumps(body, ensure_ascii=True, allow_nan=True).encode()  # \ud800 travels as its escape


@settings(FUZZ, max_examples=examples(200))
@given(body=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6), api=st.sampled_from(["completions", "chat"]))
def test_serve_answers_any_body_with_a_4xx_or_a_request(body: dict, api: str) -> None:
    from kvplan.engine.sampling_params import SamplingParams

    CASES["serve"] += 1
    tokenizer = WordTokenizer(1000)
    try:
        parsed = parse_request(parse_json_body(_dump(body), 64), api, served_model_name="tiny", tokenizer=tokenizer,
                               vocab_size=1000, max_model_len=256)
        SamplingParams(max_tokens=parsed.max_tokens, temperature=parsed.temperature, top_p=parsed.top_p,
                       top_k=parsed.top_k, min_p=parsed.min_p, ignore_eos=parsed.ignore_eos, seed=parsed.seed,
                       stop_token_ids=parsed.stop_token_ids)  # as kvplan serve builds them
    except ProtocolError as exc:
        assert 400 <= exc.status < 500
    except KvplanError:
        pass


EVENTS = st.one_of(st.just(b"[DONE]"), st.binary(max_size=30),
                   st.builds(_dump, st.fixed_dictionaries({}, optional={
                       "choices": st.one_of(VALUES, st.lists(st.fixed_dictionaries({}, optional={
                           "text": TEXT, "finish_reason": SCALARS, "delta": VALUES}), max_size=3)),
                       "usage": st.one_of(VALUES, st.fixed_dictionaries({}, optional={
                           "completion_tokens": NUMBERS, "prompt_tokens": NUMBERS})),
                       "error": VALUES})))


@settings(FUZZ, max_examples=examples(200))
@given(events=st.lists(EVENTS, max_size=8), cut=st.integers(1, 64))
def test_a_target_stream_fails_the_request_as_data(events: list[bytes], cut: int) -> None:
    CASES["target"] += 1
    client = StreamClient(None, "", "completions", "tiny", clock_s=lambda: 0.0, start_s=0.0, secret=None)  # type: ignore[arg-type]
    progress = Progress(Request.of_ids((11, 12), 4, 0.0, request_id="r0", class_name="fuzz"), arrival_s=0.0)
    sink = client._sse_sink(progress)
    stream = b"".join(b"data: " + e + b"\n\n" for e in events)
    try:
        for i in range(0, len(stream), cut):  # the bytes arrive in reads of `cut` bytes
            sink(stream[i:i + cut], 1.0)
    except (ValueError, TypeError, AttributeError, ServerError, HttpProtocolError):
        pass  # StreamClient.send turns each into the request's recorded error
    for count in (progress.usage_tokens, progress.usage_prompt_tokens):
        assert count is None or (isinstance(count, int) and 0 <= count < MAX_REPORTED_TOKENS)


class _Conn:
    """A connection stand-in: the exchange only ever discards it."""

    discarded = False

    def discard(self) -> None:
        self.discarded = True


CHUNK_SIZES = st.one_of(st.integers(0, 64).map(lambda n: f"{n:x}".encode()), st.sampled_from(
    [b"-6", b"-0", b"+5", b"0x5", b"f" * 20, b"", b" 5", b"5 ", b"5;ext=1", b"zz", b"\x00", b"5\r", b"1e3"]))
HEADS = st.sampled_from([
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n",
    b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 200 OK\r\n", b"HTTP/1.1 500 Boom\r\nContent-Length: %d\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n", b"HTTP/1.1 2000 OK\r\n",
    b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\nConnection: upgrade\r\n", b"HTTP/9.9 200 OK\r\n", b"SMTP\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n", b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n",
    b"HTTP/1.1 204 No Content\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n"])


@st.composite
def _responses(draw) -> bytes:
    """An HTTP/1.1 answer whose framing may be wrong anywhere: head, chunk sizes, CRLFs, lengths."""
    events = b"".join(b"data: " + e + b"\n\n" for e in draw(st.lists(EVENTS, max_size=4)))
    head = draw(HEADS)
    if b"%d" in head:
        head = head % draw(st.one_of(st.just(len(events)), st.integers(0, 200)))
    head += b"".join(draw(st.lists(st.sampled_from([b"X-A: 1\r\n", b"Connection: close\r\n", b"bad header\r\n",
                                                    b"X-Big: " + b"a" * 70000 + b"\r\n"]), max_size=2)))
    body = events
    if b"chunked" in head:
        cuts = sorted(draw(st.lists(st.integers(0, len(events)), max_size=4)))
        pieces = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)])]
        body = b"".join((f"{len(p):x}".encode() if draw(st.booleans()) else draw(CHUNK_SIZES)) + b"\r\n" + p
                        + draw(st.sampled_from([b"\r\n", b"\r\n", b"\n", b"", b"XY"])) for p in pieces)
        body += draw(st.sampled_from([b"0\r\n\r\n", b"0\r\nX-T: 1\r\n\r\n", b"", b"-1\r\n"]))
    return head + b"\r\n" + body + draw(st.sampled_from([b"", b"", b"GARBAGE", b"HTTP/1.1 200 OK\r\n\r\n"]))


@settings(FUZZ, max_examples=examples(1800))
@given(wire=_responses(), cut=st.integers(1, 512), close=st.booleans())
def test_http_framing_ends_every_answer_on_the_real_parser(wire: bytes, cut: int, close: bool) -> None:
    """Any bytes, in reads of any size, through llhttp and the SSE sink: each read returns, and the
    answer ends as a status, an HTTP error or the sink's verdict, never a hang or another exception
    (a hand-written parser once looped forever on a negative chunk size)."""
    import asyncio

    from kvplan.stress.targets.http1 import HttpError, _Exchange

    CASES["http"] += 1
    client = StreamClient(None, "", "completions", "tiny", clock_s=lambda: 0.0, start_s=0.0, secret=None)  # type: ignore[arg-type]
    progress = Progress(Request.of_ids((11, 12), 4, 0.0, request_id="r0", class_name="fuzz"), arrival_s=0.0)

    async def exchange() -> asyncio.Future[int]:
        ex = _Exchange(_Conn(), client._sse_sink(progress), None, 60.0)  # type: ignore[arg-type]
        for i in range(0, len(wire), cut):
            ex.feed(wire[i:i + cut])
            if ex.future.done():
                break
        if close or not ex.future.done():
            ex.lost(None)  # the server closes: whatever was open must end now
        ex.close()
        return ex.future

    future = _LOOP.run_until_complete(exchange())
    assert future.done()
    exc = future.exception()
    assert exc is None or isinstance(exc, (HttpError, ValueError, TypeError, AttributeError, ServerError)), repr(exc)
    if exc is None:
        assert 200 <= future.result() < 600


_LOOP = __import__("asyncio").new_event_loop()
