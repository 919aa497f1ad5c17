"""The SSE side of the HTTP target: `data:` lines as the SSE spec reads them (the space after the
colon is optional), events split across reads, comments and other fields ignored, CRLF endings;
then one event at a time, the request body and the record (as vLLM's request functions in
benchmarks/lib/endpoint_request_func.py 0.19.1 build and read them)."""
from __future__ import annotations

import json
import random
from array import array

import pytest

from kvplan.stress.targets.openai_stream import (
    MAX_REPORTED_TOKENS,
    Progress,
    RequestSettings,
    ServerError,
    StreamClient,
    _token_count,
    make_record,
)
from kvplan.stress.targets.server_features import KNOWN_KINDS
from kvplan.workload.request import Request


def _feed(chunks: list[bytes]) -> Progress:
    client = StreamClient(None, "", "completions", "tiny", clock_s=lambda: 0.0, start_s=0.0, secret=None)  # type: ignore[arg-type]
    progress = Progress(Request.of_ids((11, 12), 8, 0.0, request_id="r0"), arrival_s=0.0)
    sink = client._sse_sink(progress)
    for i, chunk in enumerate(chunks):
        sink(chunk, float(i))
    return progress


def _event(text: str, finish: str | None = None) -> bytes:
    return json.dumps({"choices": [{"text": text, "finish_reason": finish}]}).encode()


def test_data_without_a_space_is_an_event() -> None:
    p = _feed([b"data:" + _event("a") + b"\n\n", b"data: " + _event("b", "length") + b"\n\ndata:[DONE]\n\n"])
    assert p.token_times_s == [0.0, 1.0] and p.finish_reason == "length" and p.done


def test_an_event_split_across_reads_is_stamped_when_it_ends() -> None:
    line = b"data: " + _event("a") + b"\n\n"
    p = _feed([line[:7], line[7:20], line[20:]])
    assert p.token_times_s == [2.0]


def test_comments_other_fields_and_crlf() -> None:
    p = _feed([b": keep-alive\r\n\r\nevent: message\r\nid: 7\r\ndata: " + _event("a") + b"\r\n\r\n"])
    assert p.token_times_s == [0.0]


# --- one event at a time, and the request body (vLLM's request functions, endpoint_request_func.py 0.19.1) ---


def _client(api: str = "completions", kind: str = "vllm", settings: RequestSettings | None = None) -> StreamClient:
    return StreamClient(None, "/base", api, "served", clock_s=lambda: 0.0, start_s=0.0, secret=None,  # type: ignore[arg-type]
                        features=KNOWN_KINDS[kind], settings=settings)


def _progress(out: int = 4) -> Progress:
    return Progress(Request.of_ids((11, 12, 13), out, 0.5, request_id="r0", index=3), arrival_s=0.5)


def test_an_event_s_text_usage_and_finish() -> None:
    client, p = _client(), _progress()
    client._event(p, json.dumps({"choices": [{"text": "a", "finish_reason": None}]}).encode(), 1.0)
    client._event(p, json.dumps({"choices": [{"text": "", "finish_reason": None}]}).encode(), 1.5)  # empty: no token
    client._event(p, json.dumps({"choices": [], "usage": {"completion_tokens": 7, "prompt_tokens": 3}}).encode(), 2.0)
    client._event(p, json.dumps({"choices": [{"text": "b", "finish_reason": "length"}]}).encode(), 2.5)
    assert p.token_times_s == [1.0, 2.5] and (p.usage_tokens, p.usage_prompt_tokens) == (7, 3)
    assert p.finish_reason == "length" and not p.done
    client._event(p, b"[DONE]", 3.0)
    assert p.done and p.token_times_s == [1.0, 2.5]


def test_chat_events_count_delta_content_and_keep_the_reply_when_asked() -> None:
    client, p = _client("chat"), _progress()
    p.reply = []
    for piece in ("He", None, "llo"):
        client._event(p, json.dumps({"choices": [{"delta": {"content": piece}}]}).encode(), 1.0)
    client._event(p, json.dumps({"choices": [{"text": "ignored on chat"}]}).encode(), 1.0)
    assert p.reply == ["He", "llo"] and len(p.token_times_s) == 2


@pytest.mark.parametrize("payload, error, needle", [
    (b'{"error": {"message": "too long"}}', ServerError, "too long"),
    (b'{"error": "plain"}', ServerError, "plain"),
    (b"[1, 2]", ValueError, "not a JSON object"),
    (b'{"usage": [1]}', ValueError, "usage that is not a JSON object"),
    (b'{"choices": [], "usage": {"completion_tokens": -1}}', ValueError, "completion_tokens -1"),
    (b'{"choices": [], "usage": {"completion_tokens": 1, "prompt_tokens": 1.5}}', ValueError, "prompt_tokens 1.5"),
])
def test_bad_events_fail_the_request(payload: bytes, error: type, needle: str) -> None:
    with pytest.raises(error, match=needle):
        _client()._event(_progress(), payload, 1.0)


def test_more_tokens_than_a_request_may_stream_is_a_protocol_error() -> None:
    client, p = _client(), _progress(out=1)  # at most 2 x 1 + 16 = 18 tokens
    event = json.dumps({"choices": [{"text": "x"}]}).encode()
    for _ in range(18):
        client._event(p, event, 1.0)
    with pytest.raises(ValueError, match="more than 18 tokens streamed for a request of max_tokens 1"):
        client._event(p, event, 1.0)


def test_token_counts_are_whole_and_bounded() -> None:
    assert _token_count(5, "k") == 5 and _token_count(5.0, "k") == 5 and _token_count(0, "k") == 0
    for bad in (True, "5", -1, 2.5, MAX_REPORTED_TOKENS, float("nan"), None):
        with pytest.raises(ValueError, match=f"the server reported k {str(bad)[:40]}, not a token count"):
            _token_count(bad, "k")


def test_the_body_as_vllm_sends_it() -> None:
    settings = RequestSettings(body={"temperature": 0.7, "top_k": 5}, ignore_eos=True)
    body = _client(settings=settings).body(_progress().spec)
    assert body == {"max_tokens": 4, "temperature": 0.7, "stream": True, "stream_options": {"include_usage": True},
                    "ignore_eos": True, "min_tokens": 4, "top_k": 5, "model": "served", "prompt": [11, 12, 13]}
    plain = _client(kind="openai").body(_progress().spec)  # no token ids, no ignore_eos / min_tokens on this server
    assert plain == {"max_tokens": 4, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
                     "model": "served", "prompt": "t11 t12 t13"}
    chat = _client("chat").body(_progress().spec)
    assert chat["messages"] == [{"role": "user", "content": "t11 t12 t13"}] and "prompt" not in chat
    assert _client().path == "/base/v1/completions" and _client("chat").path == "/base/v1/chat/completions"


def test_lora_modules_as_the_model_field() -> None:
    rr = RequestSettings(lora_modules=("a", "b", "c"), lora_assignment="round-robin")
    assert [rr.model_for(i, "m") for i in range(4)] == ["a", "b", "c", "a"]
    assert RequestSettings().model_for(3, "m") == "m"
    seeded = RequestSettings(lora_modules=("a", "b"), seed=2)
    assert [seeded.model_for(i, "m") for i in range(5)] == [random.Random(2 * 1_000_003 + i).choice(("a", "b"))
                                                            for i in range(5)]


def test_a_later_turn_s_prompt_is_sent_as_given() -> None:
    client, spec = _client(), _progress().spec
    assert client.use_prompt(spec, None) == "t11 t12 t13" and client.body(spec)["prompt"] == "t11 t12 t13"
    assert client.use_prompt(spec, "history reply new") == "history reply new"
    assert client.body(spec)["prompt"] == "history reply new"
    chat = _client("chat")
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert chat.use_prompt(spec, messages) is messages and chat.body(spec)["messages"] == messages
    assert chat.use_prompt(_progress().spec, None) == [{"role": "user", "content": "t11 t12 t13"}]


def test_a_record_of_what_was_seen() -> None:
    p = _progress()
    p.token_times_s, p.usage_tokens, p.usage_prompt_tokens = [1.0, 1.5], 3, 9
    rec = make_record(p, "ok", None, 2.0, False)
    assert (rec.request_id, rec.arrival_s, rec.first_token_s, rec.token_times_s, rec.finish_s) == (
        "r0", 0.5, 1.0, (1.0, 1.5), 2.0)
    assert (rec.prompt_tokens, rec.output_tokens, rec.server_input_tokens, rec.server_output_tokens) == (3, 3, 9, 3)
    assert rec.queue_s == 0.0 and rec.status == "ok" and not rec.is_warmup
    late = Progress(p.spec, arrival_s=0.75)  # sent 0.25 s after it was due (a client slot)
    late_rec = make_record(late, "error", "boom", 1.0, True)
    assert late_rec.queue_s == pytest.approx(0.25) and late_rec.output_tokens == 0 and late_rec.first_token_s is None
    assert (late_rec.status, late_rec.error, late_rec.is_warmup) == ("error", "boom", True)


# --- error texts, the line bound, what prepare builds (the SSE parser's mutation survivors) ---------------


def test_one_line_collapses_masks_then_cuts() -> None:
    from kvplan.stress.targets.openai_stream import MAX_RECORD_ERROR_CHARS, one_line

    assert one_line("a\n  b\tc") == "a b c"
    assert one_line(ValueError()) == "ValueError" and one_line(KeyError("k")) == "'k'"
    assert one_line("key sk-secret-123 echoed", secrets=["sk-secret-123"]) == "key *** echoed"
    assert one_line("x" * 1000) == "x" * MAX_RECORD_ERROR_CHARS and MAX_RECORD_ERROR_CHARS == 300
    assert one_line("abcdef", max_chars=4) == "abcd"


@pytest.mark.parametrize("code, reason, headers, body, expected", [
    (500, "Internal Server Error", {}, b"  boom \n", "http 500: boom"),
    (503, " Service Unavailable ", {}, b"", "http 503: Service Unavailable"),
    (302, "Found", {"location": "/elsewhere"}, b"", "http 302: redirected to /elsewhere; Found"),
    (300, "Multiple", {"location": "/a"}, b"x", "http 300: redirected to /a; x"),
    (399, "", {"location": "/b"}, b"", "http 399: redirected to /b"),
    (400, "Bad Request", {"location": "/c"}, b"bad", "http 400: bad"),  # a location outside 3xx is not a redirect
    (299, "Odd", {"location": "/d"}, b"", "http 299: Odd"),
    (502, "", {}, b"\xff\xfe", "http 502: \ufffd\ufffd"),  # bytes that are not UTF-8 are replaced, not raised
])
def test_http_error_texts(code: int, reason: str, headers: dict[str, str], body: bytes, expected: str) -> None:
    from kvplan.stress.targets.openai_stream import http_error_text

    assert http_error_text(code, reason, headers, body) == expected


def test_an_sse_line_is_bounded_until_it_ends() -> None:
    from kvplan.stress.targets.http1 import HttpProtocolError
    from kvplan.stress.targets.openai_stream import MAX_SSE_LINE_BYTES

    assert MAX_SSE_LINE_BYTES == 4 * 2**20
    progress = Progress(Request.of_ids((11,), 8, 0.0, request_id="r0"), arrival_s=0.0)
    sink = _client()._sse_sink(progress)
    sink(b": " + b"x" * (MAX_SSE_LINE_BYTES - 2), 0.0)  # exactly the bound, still open: kept
    with pytest.raises(HttpProtocolError, match="an SSE line longer than 4,194,304 bytes"):
        sink(b"y", 1.0)  # one byte past it
    ended = Progress(Request.of_ids((11,), 8, 0.0, request_id="r1"), arrival_s=0.0)
    long_sink = _client()._sse_sink(ended)
    with pytest.raises(HttpProtocolError):  # past the bound in one read: refused too
        long_sink(b": " + b"x" * MAX_SSE_LINE_BYTES, 0.0)
    whole = Progress(Request.of_ids((11,), 8, 0.0, request_id="r2"), arrival_s=0.0)
    _client()._sse_sink(whole)(b": " + b"x" * MAX_SSE_LINE_BYTES + b"\n", 0.0)  # a long line that ends: read


def test_events_in_one_read_share_its_stamp_and_the_run_start_is_subtracted() -> None:
    client = StreamClient(None, "", "completions", "m", clock_s=lambda: 0.0, start_s=100.0, secret=None)  # type: ignore[arg-type]
    p = Progress(Request.of_ids((11,), 8, 0.0, request_id="r0"), arrival_s=0.0)
    sink = client._sse_sink(p)
    sink(b"data: " + _event("a") + b"\n\ndata: " + _event("b") + b"\n\ndata: " + _event("c")[:5], 103.5)
    assert p.token_times_s == [3.5, 3.5] and p.progress_read_s == 103.5
    sink(_event("c")[5:] + b"\n\n", 104.0)  # the rest of the third event
    assert p.token_times_s == [3.5, 3.5, 4.0] and p.progress_read_s == 104.0
    sink(b"data: " + _event("") + b"\n\n", 105.0)  # no content: progress stays at the last token's read
    assert p.progress_read_s == 104.0
    sink(b"data:  [DONE]  \n", 106.0)  # the payload is stripped before it is read
    assert p.done


def test_usage_without_counts_and_choices_that_are_null() -> None:
    client, p = _client(), _progress()
    client._event(p, b'{"choices": null, "usage": {"prompt_tokens": null}}', 1.0)
    assert (p.usage_tokens, p.usage_prompt_tokens) == (0, None)  # vLLM always sends completion_tokens; 0 if not
    client._event(p, b'{"choices": [{"text": "a"}], "usage": {}}', 1.0)  # an empty usage is no usage
    assert (p.usage_tokens, p.token_times_s) == (0, [1.0])


def test_prepare_builds_text_only_where_it_is_sent() -> None:
    first = Request.of_ids((11, 12), 4, 0.0, request_id="a")
    own = Request(0.0, 2, 4, request_id="b", prompt_text="a dataset's own prompt")
    later = Request.of_ids((11, 12, 13), 4, None, request_id="c", turn_index=1)
    tokens = _client()  # vLLM takes token ids on completions: nothing to build
    tokens.prepare([first, own, later])
    assert tokens._texts == {"b": "a dataset's own prompt"}
    plain = _client(kind="openai")  # a server without token-id prompts: text for each first turn
    plain.prepare([first, own, later])
    assert plain._texts == {"a": "t11 t12", "b": "a dataset's own prompt"}
    chat = _client("chat")
    chat.prepare([first, later])
    assert chat._texts == {"a": "t11 t12"}


def test_a_turn_s_new_message_has_a_leading_space_in_word_form() -> None:
    later = Request.of_ids((11, 12, 13), 4, None, request_id="c", turn_index=1, turn_ids=bytes(array("I", [13])))
    assert _client().message_text(later) == " t13"


def test_the_prompt_is_sent_once() -> None:
    client = _client(kind="openai")
    spec = _progress().spec
    client.prepare([spec])
    assert client.body(spec)["prompt"] == "t11 t12 t13" and client._texts == {}


# --- one request end to end against a scripted pool (what `send` passes and what it returns) ------------


class _ScriptedPool:
    """Stands in for http1.Http1Pool: records what `send` passes, then plays a head, body chunks
    and a status, or raises."""

    read_timeout_s = 2.0

    def __init__(self, code: int = 200, chunks: tuple[bytes, ...] = (), reason: str = "OK",
                 headers: dict[str, str] | None = None, raises: BaseException | None = None) -> None:
        self.code, self.chunks, self.reason, self.headers, self.raises = code, chunks, reason, headers or {}, raises
        self.seen: dict = {}

    async def post_stream(self, path, body, extra_headers, sink, on_sent=None, on_head=None, total_timeout_s=None,
                          progress=None) -> int:
        self.seen = dict(path=path, body=body, headers=extra_headers, timeout_s=total_timeout_s, progress=progress)
        on_sent()
        if self.raises is not None:
            raise self.raises
        on_head(self.code, self.reason, self.headers)
        for i, chunk in enumerate(self.chunks):
            sink(chunk, 10.0 + i)
        return self.code


def _send(pool: _ScriptedPool, out: int = 3, settings: RequestSettings | None = None,
          prompt_text: str | None = None) -> tuple[str | None, Progress]:
    import asyncio

    client = StreamClient(pool, "", "completions", "m", clock_s=lambda: 7.5, start_s=10.0, secret=None,  # type: ignore[arg-type]
                          settings=settings)
    spec = Request.of_ids((11, 12), out, 0.0, request_id="r9", prompt_text=prompt_text)
    p = Progress(spec, arrival_s=0.0)
    return asyncio.run(client.send(p)), p


def test_send_passes_the_body_headers_and_deadline() -> None:
    pool = _ScriptedPool(chunks=(b'data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n',))
    error, p = _send(pool, out=3, settings=RequestSettings(headers={"X-A": "1"}, request_id_prefix="run-"),
                     prompt_text="café")
    assert error is None and p.done and p.token_times_s == [0.0] and p.arrival_s == 7.5  # on_sent: the clock
    assert pool.seen["headers"] == {"X-A": "1", "X-Request-Id": "run-r9"}
    assert pool.seen["timeout_s"] == 2.0 * (3 + 2)  # every token may take the idle timeout, plus two
    assert pool.seen["progress"]() == 10.0  # the read that brought the last content token
    body = pool.seen["body"]
    assert '"prompt":"café"'.encode() in body and b", " not in body and b'": ' not in body  # compact, UTF-8


@pytest.mark.parametrize(("chunks", "error"), [
    ((b'data: {"choices":[{"text":"a"}]}\n\n',),
     "incomplete: the stream ended without [DONE], a finish_reason or usage"),
    ((b'data: {"choices":[{"text":"a","finish_reason":"length"}]}\n\n',), None),  # transformers serve: no [DONE]
    ((b'data: {"choices":[],"usage":{"completion_tokens":1}}\n\n',), None),
    ((b'data: {"error": {"message": "too long"}}\n\n',), "server error: too long"),
    ((b'data: {"error": {"code": 400}}\n\n',), "server error: {'code': 400}"),  # no message: the object
    ((b"data: {nope\n\n",), "protocol: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ((b"data: " + b"[" * 100_000 + b"\n\n",), "protocol: an SSE event nested too deep to read"),
])
def test_send_classifies_what_the_stream_said(chunks: tuple[bytes, ...], error: str | None) -> None:
    assert _send(_ScriptedPool(chunks=chunks))[0] == error


@pytest.mark.parametrize(("raised", "error"), [
    ("HttpTimeout", "timeout: idle 2 s"),
    ("HttpDisconnected", "disconnected: HttpDisconnected"),  # no text: the kind's name
    ("HttpConnectError", "connect: refused"),
    ("HttpProtocolError", "protocol: bad chunk"),
])
def test_send_names_each_transport_failure(raised: str, error: str) -> None:
    from kvplan.stress.targets import http1

    text = {"HttpTimeout": "idle 2 s", "HttpDisconnected": "", "HttpConnectError": "refused",
            "HttpProtocolError": "bad chunk"}[raised]
    assert _send(_ScriptedPool(raises=getattr(http1, raised)(text)))[0] == error


def test_an_error_page_is_kept_up_to_its_bound() -> None:
    from kvplan.stress.targets.openai_stream import MAX_ERROR_BODY_BYTES

    chunk = b"x" * (MAX_ERROR_BODY_BYTES // 2)
    error, _ = _send(_ScriptedPool(code=500, reason="Internal", chunks=(chunk, chunk, chunk)))
    assert error == "http 500: " + "x" * MAX_ERROR_BODY_BYTES  # the third chunk came past the bound
    assert _send(_ScriptedPool(code=502, reason="Bad Gateway", chunks=(b"up", b"stream")))[0] == "http 502: upstream"


def test_prompts_from_a_tokenizer_are_used_where_given() -> None:
    class Exact:
        def text(self, ids) -> str:
            return "|".join(map(str, ids))

        def token_ids(self, ids) -> list[int]:
            return [i + 1000 for i in ids]

    client = StreamClient(None, "", "completions", "m", clock_s=lambda: 0.0, start_s=0.0, secret=None,  # type: ignore[arg-type]
                          prompts=Exact())  # type: ignore[arg-type]
    spec = _progress().spec
    assert client.text_of((1, 2)) == "1|2" and client.body(spec)["prompt"] == [1011, 1012, 1013]
    later = Request.of_ids((11, 12, 13), 4, None, request_id="c", turn_index=1, turn_ids=bytes(array("I", [13])))
    assert client.message_text(later) == "13"  # a tokenizer's text needs no added space


def test_prepare_goes_past_a_later_turn_and_a_dataset_prompt_is_sent_unprepared() -> None:
    later = Request.of_ids((11, 12, 13), 4, None, request_id="c", turn_index=1)
    first = Request.of_ids((11, 12), 4, 0.0, request_id="a")
    plain = _client(kind="openai")
    plain.prepare([later, first])
    assert plain._texts == {"a": "t11 t12"}
    own = Request(0.0, 2, 4, request_id="b", prompt_text="its own words")
    assert _client().use_prompt(own, None) == "its own words" and _client().body(own)["prompt"] == "its own words"


def test_the_model_field_follows_the_request_s_index() -> None:
    settings = RequestSettings(lora_modules=("a", "b", "c"), lora_assignment="round-robin")
    assert _client(settings=settings).body(_progress().spec)["model"] == "a"  # index 3 of 3 modules


def test_more_tokens_bound_scales_with_max_tokens() -> None:
    client, p = _client(), _progress(out=3)  # at most 2 x 3 + 16 = 22 tokens
    event = json.dumps({"choices": [{"text": "x"}]}).encode()
    for _ in range(22):
        client._event(p, event, 1.0)
    with pytest.raises(ValueError, match="more than 22 tokens"):
        client._event(p, event, 1.0)


def test_small_texts_as_they_are() -> None:
    from kvplan.stress.targets.openai_stream import one_line

    assert one_line("") == "" and one_line(ValueError("")) == "ValueError"
    long_value = "9" * 50
    with pytest.raises(ValueError, match=f"the server reported k {'9' * 40}, not"):
        _token_count(long_value, "k")
    unsent = Progress(Request(None, 3, 4, request_id="u"), arrival_s=2.5)  # closed loop: due at the start (rate inf)
    assert make_record(unsent, "ok", None, 3.0, False).queue_s == 2.5
