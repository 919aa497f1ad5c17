"""The SSE side of the HTTP target: `data:` lines as the SSE spec reads them (the space after the
colon is optional), events split across reads, comments and other fields ignored, CRLF endings."""
from __future__ import annotations

import json

from kvplan.stress.targets.openai_stream import Progress, StreamClient
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
